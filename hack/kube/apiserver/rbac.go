package main

// RBAC authorization, as kube-apiserver's RBAC authorizer decides (plugin/pkg/auth/authorizer/rbac in
// the Kubernetes main repository, not packaged): a request is allowed when a rule of a role bound to
// its user allows it, else RBAC has no opinion and the request is denied with the standard Forbidden
// message. The roles and bindings are the Role, ClusterRole, RoleBinding and ClusterRoleBinding
// objects this server stores, read through the shared informers of its loopback client.
//
//   - ClusterRoleBindings apply everywhere; RoleBindings in the request's namespace only (a
//     RoleBinding may grant a ClusterRole's rules there). A request with no namespace (cluster-scoped
//     objects, or a list across namespaces) sees ClusterRoleBindings only.
//   - Subjects: User (by name), Group (one of the user's groups), ServiceAccount (the user
//     system:serviceaccount:<namespace>:<name>; a RoleBinding's subject without a namespace means the
//     binding's namespace).
//   - A rule allows a resource request when the verb ("*" = any), the API group ("*" = any), the
//     resource (with its subresource: "pods/status"; "*" = any resource or subresource; "*/scale" =
//     that subresource of any resource) and, when the rule has resourceNames, the object's name match;
//     a request that names no object (list, watch, create, deletecollection) matches no rule with
//     resourceNames. A non-resource request (/healthz, /apis, ...) matches nonResourceURLs: an exact
//     path, "*", or a prefix ending in "*".
//   - system:masters is always allowed (the privileged group authorizer in front of RBAC, as in
//     kube-apiserver: this server's own loopback client and the lab's administrator are in it).

import (
	"context"
	"fmt"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/client-go/informers"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
)

// rbacObjects is where the authorizer reads roles and bindings (informers in the server, a table in
// the unit tests).
type rbacObjects interface {
	ClusterRoleBindings() ([]*rbacv1.ClusterRoleBinding, error)
	RoleBindings(namespace string) ([]*rbacv1.RoleBinding, error)
	ClusterRole(name string) (*rbacv1.ClusterRole, error)
	Role(namespace, name string) (*rbacv1.Role, error)
}

type rbacAuthorizer struct{ objects rbacObjects }

// newAuthorizer: system:masters, then RBAC (kube-apiserver's --authorization-mode=RBAC chain, the
// Node authorizer aside: the lab has no kubelets with their own credentials). Registers the RBAC
// informers on the factory, which the generic server starts (and /readyz waits for).
func newAuthorizer(factory informers.SharedInformerFactory) (authorizer.Authorizer, *rbacAuthorizer) {
	rbac := factory.Rbac().V1()
	objects := listerObjects{
		clusterRoleBindings: rbac.ClusterRoleBindings().Lister(),
		roleBindings:        rbac.RoleBindings().Lister(),
		clusterRoles:        rbac.ClusterRoles().Lister(),
		roles:               rbac.Roles().Lister(),
	}
	// (Lister() registers each informer with the factory: this runs before the factory starts.)
	r := &rbacAuthorizer{objects: objects}
	privileged := authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)
	return union.New(privileged, r), r
}

func (r *rbacAuthorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	allowed := false
	var reason string
	var errs []error
	r.visitRulesFor(attrs.GetUser(), attrs.GetNamespace(), func(source string, rule *rbacv1.PolicyRule, err error) bool {
		if err != nil {
			errs = append(errs, err)
			return true
		}
		if ruleAllows(attrs, rule) {
			allowed, reason = true, "RBAC: allowed by "+source
			return false
		}
		return true
	})
	if allowed {
		return authorizer.DecisionAllow, reason, nil
	}
	if len(errs) > 0 {
		reason = fmt.Sprintf("RBAC: %v", utilerrors.NewAggregate(errs))
	}
	return authorizer.DecisionNoOpinion, reason, nil
}

// RulesFor (SelfSubjectRulesReview, `kubectl auth can-i --list`): every rule that applies to the user
// in the namespace, as the RBAC authorizer lists them.
func (r *rbacAuthorizer) RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	rules, err := r.rulesFor(u, namespace)
	var resourceRules []authorizer.ResourceRuleInfo
	var nonResourceRules []authorizer.NonResourceRuleInfo
	for _, rule := range rules {
		if len(rule.Resources) > 0 {
			resourceRules = append(resourceRules, &authorizer.DefaultResourceRuleInfo{
				Verbs: rule.Verbs, APIGroups: rule.APIGroups, Resources: rule.Resources, ResourceNames: rule.ResourceNames})
		}
		if len(rule.NonResourceURLs) > 0 {
			nonResourceRules = append(nonResourceRules, &authorizer.DefaultNonResourceRuleInfo{
				Verbs: rule.Verbs, NonResourceURLs: rule.NonResourceURLs})
		}
	}
	return resourceRules, nonResourceRules, false, err
}

// rulesFor: the policy rules that apply to the user in the namespace (errors: roles that are missing).
func (r *rbacAuthorizer) rulesFor(u user.Info, namespace string) ([]rbacv1.PolicyRule, error) {
	var rules []rbacv1.PolicyRule
	var errs []error
	r.visitRulesFor(u, namespace, func(_ string, rule *rbacv1.PolicyRule, err error) bool {
		if err != nil {
			errs = append(errs, err)
		} else {
			rules = append(rules, *rule)
		}
		return true
	})
	return rules, utilerrors.NewAggregate(errs)
}

// visitRulesFor calls visit with every rule that applies to the user in the namespace (ClusterRoleBindings,
// then the namespace's RoleBindings) until it returns false; a missing role is visited as an error.
func (r *rbacAuthorizer) visitRulesFor(u user.Info, namespace string, visit func(source string, rule *rbacv1.PolicyRule, err error) bool) {
	if u == nil {
		visit("", nil, fmt.Errorf("no user on request"))
		return
	}
	clusterBindings, err := r.objects.ClusterRoleBindings()
	if err != nil {
		if !visit("", nil, err) {
			return
		}
	}
	for _, binding := range clusterBindings {
		i, ok := appliesTo(u, binding.Subjects, "")
		if !ok {
			continue
		}
		rules, err := r.roleRules(binding.RoleRef, "")
		if err != nil {
			if !visit("", nil, err) {
				return
			}
			continue
		}
		source := fmt.Sprintf("ClusterRoleBinding %q of %s %q to %s", binding.Name, binding.RoleRef.Kind, binding.RoleRef.Name,
			describeSubject(binding.Subjects[i], ""))
		for j := range rules {
			if !visit(source, &rules[j], nil) {
				return
			}
		}
	}
	if namespace == "" {
		return
	}
	bindings, err := r.objects.RoleBindings(namespace)
	if err != nil {
		if !visit("", nil, err) {
			return
		}
	}
	for _, binding := range bindings {
		i, ok := appliesTo(u, binding.Subjects, namespace)
		if !ok {
			continue
		}
		rules, err := r.roleRules(binding.RoleRef, namespace)
		if err != nil {
			if !visit("", nil, err) {
				return
			}
			continue
		}
		source := fmt.Sprintf("RoleBinding %q of %s %q to %s", binding.Name+"/"+binding.Namespace, binding.RoleRef.Kind,
			binding.RoleRef.Name, describeSubject(binding.Subjects[i], binding.Namespace))
		for j := range rules {
			if !visit(source, &rules[j], nil) {
				return
			}
		}
	}
}

// roleRules: the rules of a binding's role (a Role in the binding's namespace, or a ClusterRole).
func (r *rbacAuthorizer) roleRules(ref rbacv1.RoleRef, namespace string) ([]rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "Role":
		role, err := r.objects.Role(namespace, ref.Name)
		if err != nil {
			return nil, err
		}
		return role.Rules, nil
	case "ClusterRole":
		role, err := r.objects.ClusterRole(ref.Name)
		if err != nil {
			return nil, err
		}
		return role.Rules, nil
	}
	return nil, fmt.Errorf("unsupported role reference kind: %q", ref.Kind)
}

func describeSubject(s rbacv1.Subject, namespace string) string {
	if s.Kind == rbacv1.ServiceAccountKind {
		ns := s.Namespace
		if ns == "" {
			ns = namespace
		}
		return fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+ns)
	}
	return fmt.Sprintf("%s %q", s.Kind, s.Name)
}

// appliesTo: the index of the first subject that is the user (or one of its groups).
func appliesTo(u user.Info, subjects []rbacv1.Subject, namespace string) (int, bool) {
	for i, subject := range subjects {
		if subjectIsUser(u, subject, namespace) {
			return i, true
		}
	}
	return 0, false
}

func subjectIsUser(u user.Info, subject rbacv1.Subject, namespace string) bool {
	switch subject.Kind {
	case rbacv1.UserKind:
		return u.GetName() == subject.Name
	case rbacv1.GroupKind:
		for _, group := range u.GetGroups() {
			if group == subject.Name {
				return true
			}
		}
		return false
	case rbacv1.ServiceAccountKind:
		// a RoleBinding's ServiceAccount subject defaults to the binding's namespace
		ns := subject.Namespace
		if ns == "" {
			ns = namespace
		}
		return ns != "" && serviceaccount.MatchesUsername(ns, subject.Name, u.GetName())
	}
	return false
}

// ruleAllows: the rule grants the request (kube's rbac.RuleAllows).
func ruleAllows(attrs authorizer.Attributes, rule *rbacv1.PolicyRule) bool {
	if !verbMatches(rule, attrs.GetVerb()) {
		return false
	}
	if !attrs.IsResourceRequest() {
		return nonResourceURLMatches(rule, attrs.GetPath())
	}
	resource := attrs.GetResource()
	if attrs.GetSubresource() != "" {
		resource += "/" + attrs.GetSubresource()
	}
	return apiGroupMatches(rule, attrs.GetAPIGroup()) &&
		resourceMatches(rule, resource, attrs.GetSubresource()) &&
		resourceNameMatches(rule, attrs.GetName())
}

func verbMatches(rule *rbacv1.PolicyRule, verb string) bool {
	for _, v := range rule.Verbs {
		if v == rbacv1.VerbAll || v == verb {
			return true
		}
	}
	return false
}

func apiGroupMatches(rule *rbacv1.PolicyRule, group string) bool {
	for _, g := range rule.APIGroups {
		if g == rbacv1.APIGroupAll || g == group {
			return true
		}
	}
	return false
}

// resourceMatches: "*", the exact resource[/subresource], or "*/<subresource>".
func resourceMatches(rule *rbacv1.PolicyRule, combined, subresource string) bool {
	for _, r := range rule.Resources {
		if r == rbacv1.ResourceAll || r == combined {
			return true
		}
		if subresource != "" && r == "*/"+subresource {
			return true
		}
	}
	return false
}

// resourceNameMatches: no resourceNames in the rule, or the object's name among them (a request
// naming no object matches no rule with resourceNames).
func resourceNameMatches(rule *rbacv1.PolicyRule, name string) bool {
	if len(rule.ResourceNames) == 0 {
		return true
	}
	for _, n := range rule.ResourceNames {
		if n == name {
			return true
		}
	}
	return false
}

func nonResourceURLMatches(rule *rbacv1.PolicyRule, path string) bool {
	for _, u := range rule.NonResourceURLs {
		if u == rbacv1.NonResourceAll || u == path {
			return true
		}
		if strings.HasSuffix(u, "*") && strings.HasPrefix(path, strings.TrimRight(u, "*")) {
			return true
		}
	}
	return false
}

// listerObjects reads the informers' caches.
type listerObjects struct {
	clusterRoleBindings rbaclisters.ClusterRoleBindingLister
	roleBindings        rbaclisters.RoleBindingLister
	clusterRoles        rbaclisters.ClusterRoleLister
	roles               rbaclisters.RoleLister
}

func (l listerObjects) ClusterRoleBindings() ([]*rbacv1.ClusterRoleBinding, error) {
	return l.clusterRoleBindings.List(labels.Everything())
}

func (l listerObjects) RoleBindings(namespace string) ([]*rbacv1.RoleBinding, error) {
	return l.roleBindings.RoleBindings(namespace).List(labels.Everything())
}

func (l listerObjects) ClusterRole(name string) (*rbacv1.ClusterRole, error) {
	return l.clusterRoles.Get(name)
}

func (l listerObjects) Role(namespace, name string) (*rbacv1.Role, error) {
	return l.roles.Roles(namespace).Get(name)
}
