package main

// RBAC's escalation prevention, as kube-apiserver's role and binding storage enforce it
// (pkg/registry/rbac/*/policybased): a user may write a Role or ClusterRole only with rules it holds
// itself (where the role applies: its namespace, or the cluster), unless it may "escalate" that role;
// and a RoleBinding or ClusterRoleBinding only to a role whose rules it holds, unless it may "bind"
// that role. An aggregationRule needs every right (cluster-admin). system:masters (the lab's
// administrator, this server's loopback client) is exempt. The coverage test is Kubernetes' own
// (k8s.io/component-helpers/auth/rbac/validation.Covers).

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/component-helpers/auth/rbac/validation"
)

// rbacPolicy is what the RBAC stores ask: the whole authorizer (escalate, bind) and RBAC's rules.
type rbacPolicy struct {
	authorizer authorizer.Authorizer
	rbac       *rbacAuthorizer
}

// escalationCheckingStore wraps the store of roles, clusterroles, rolebindings or clusterrolebindings.
type escalationCheckingStore struct {
	shortNamesStore
	policy   *rbacPolicy
	resource schema.GroupResource
}

var fullAuthority = []rbacv1.PolicyRule{
	{Verbs: []string{rbacv1.VerbAll}, APIGroups: []string{rbacv1.APIGroupAll}, Resources: []string{rbacv1.ResourceAll}},
	{Verbs: []string{rbacv1.VerbAll}, NonResourceURLs: []string{rbacv1.NonResourceAll}},
}

func (s escalationCheckingStore) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc,
	options *metav1.CreateOptions) (runtime.Object, error) {
	if err := s.check(ctx, obj); err != nil {
		return nil, err
	}
	return s.Store.Create(ctx, obj, createValidation, options)
}

func (s escalationCheckingStore) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo,
	createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool,
	options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	checked := rest.WrapUpdatedObjectInfo(objInfo, func(ctx context.Context, obj, old runtime.Object) (runtime.Object, error) {
		if onlyGCFieldsChanged(obj, old) {
			return obj, nil
		}
		return obj, s.check(ctx, obj)
	})
	return s.Store.Update(ctx, name, checked, createValidation, updateValidation, forceAllowCreate, options)
}

// check: nil when the user may write obj, else the Forbidden error kube-apiserver answers.
func (s escalationCheckingStore) check(ctx context.Context, obj runtime.Object) error {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return apierrors.NewForbidden(s.resource, "", errors.New("no user on context"))
	}
	for _, group := range u.GetGroups() {
		if group == user.SystemPrivilegedGroup {
			return nil
		}
	}
	namespace := genericapirequest.NamespaceValue(ctx)
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	name := accessor.GetName()
	forbidden := func(err error) error { return apierrors.NewForbidden(s.resource, name, err) }
	var rules []rbacv1.PolicyRule
	switch o := obj.(type) {
	case *rbacv1.Role:
		if s.allowed(ctx, u, "escalate", rbacv1.GroupName, "roles", namespace, name) {
			return nil
		}
		rules = o.Rules
	case *rbacv1.ClusterRole:
		if s.allowed(ctx, u, "escalate", rbacv1.GroupName, "clusterroles", "", name) {
			return nil
		}
		rules = o.Rules
		if o.AggregationRule != nil && len(o.AggregationRule.ClusterRoleSelectors) > 0 {
			if err := s.confirmNoEscalation(u, "", fullAuthority); err != nil {
				return forbidden(errors.New("must have cluster-admin privileges to use the aggregationRule"))
			}
		}
	case *rbacv1.RoleBinding:
		if s.bindAllowed(ctx, u, o.RoleRef, namespace) {
			return nil
		}
		if rules, err = s.policy.rbac.roleRules(o.RoleRef, namespace); err != nil {
			return forbidden(err)
		}
	case *rbacv1.ClusterRoleBinding:
		if s.bindAllowed(ctx, u, o.RoleRef, "") {
			return nil
		}
		if rules, err = s.policy.rbac.roleRules(o.RoleRef, ""); err != nil {
			return forbidden(err)
		}
	default:
		return fmt.Errorf("escalation check of a %T", obj)
	}
	if err := s.confirmNoEscalation(u, namespace, rules); err != nil {
		return forbidden(err)
	}
	return nil
}

func (s escalationCheckingStore) allowed(ctx context.Context, u user.Info, verb, group, resource, namespace, name string) bool {
	decision, _, err := s.policy.authorizer.Authorize(ctx, authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group,
		APIVersion: "*", Resource: resource, Namespace: namespace, Name: name, ResourceRequest: true})
	return err == nil && decision == authorizer.DecisionAllow
}

// bindAllowed: "bind" on the role, in the binding's namespace ("" for a ClusterRoleBinding).
func (s escalationCheckingStore) bindAllowed(ctx context.Context, u user.Info, ref rbacv1.RoleRef, namespace string) bool {
	switch ref.Kind {
	case "ClusterRole":
		return s.allowed(ctx, u, "bind", ref.APIGroup, "clusterroles", namespace, ref.Name)
	case "Role":
		return s.allowed(ctx, u, "bind", ref.APIGroup, "roles", namespace, ref.Name)
	}
	return false
}

// confirmNoEscalation: the user holds every rule (kube's rbac/validation.ConfirmNoEscalation).
func (s escalationCheckingStore) confirmNoEscalation(u user.Info, namespace string, rules []rbacv1.PolicyRule) error {
	owner, resolveErr := s.policy.rbac.rulesFor(u, namespace)
	covered, missing := validation.Covers(owner, rules)
	if covered {
		return nil
	}
	var lines []string
	seen := map[string]bool{}
	for _, rule := range missing {
		line := compactRule(rule)
		if !seen[line] {
			seen[line] = true
			lines = append(lines, line)
		}
	}
	msg := fmt.Sprintf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s",
		u.GetName(), u.GetGroups(), strings.Join(lines, "\n"))
	if resolveErr != nil {
		msg += fmt.Sprintf("; resolution errors: %v", resolveErr)
	}
	return errors.New(msg)
}

// compactRule: kube's rbacv1helpers.CompactString, e.g. {APIGroups:[""], Resources:["nodes"], Verbs:["delete"]}.
func compactRule(r rbacv1.PolicyRule) string {
	var parts []string
	for _, f := range []struct {
		name   string
		values []string
	}{{"APIGroups", r.APIGroups}, {"Resources", r.Resources}, {"NonResourceURLs", r.NonResourceURLs},
		{"ResourceNames", r.ResourceNames}, {"Verbs", r.Verbs}} {
		if len(f.values) > 0 {
			parts = append(parts, fmt.Sprintf("%s:%q", f.name, f.values))
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// onlyGCFieldsChanged: only owner references, finalizers or deletion fields differ (the garbage
// collector's writes), as kube's rbac registry lets those through.
func onlyGCFieldsChanged(obj, old runtime.Object) bool {
	if old == nil || reflect.ValueOf(old).IsNil() {
		return false
	}
	copied := obj.DeepCopyObject()
	copiedMeta, err := meta.Accessor(copied)
	if err != nil {
		return false
	}
	oldMeta, err := meta.Accessor(old)
	if err != nil {
		return false
	}
	copiedMeta.SetOwnerReferences(oldMeta.GetOwnerReferences())
	copiedMeta.SetFinalizers(oldMeta.GetFinalizers())
	copiedMeta.SetDeletionTimestamp(oldMeta.GetDeletionTimestamp())
	copiedMeta.SetDeletionGracePeriodSeconds(oldMeta.GetDeletionGracePeriodSeconds())
	return apiequality.Semantic.DeepEqual(copied, old)
}
