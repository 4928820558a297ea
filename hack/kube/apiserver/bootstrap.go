package main

// The RBAC objects a new cluster has before anyone installs anything (kube-apiserver's
// rbac/bootstrap-roles post-start hook, plugin/pkg/auth/authorizer/rbac/bootstrappolicy), limited to
// the ones what runs against the lab relies on:
//   - cluster-admin, bound to system:masters (what the administrator's rights look like to
//     SelfSubjectRulesReview; system:masters is allowed before RBAC is asked anyway);
//   - system:discovery (GET /api, /apis, /openapi, /version, /healthz, /livez, /readyz and below) and
//     system:basic-user (SelfSubjectAccessReview, SelfSubjectRulesReview, SelfSubjectReview), bound
//     to system:authenticated: every client discovers the API before its first request, and asks
//     what it may do;
//   - system:public-info-viewer (GET /healthz, /livez, /readyz, /version), bound to
//     system:authenticated and system:unauthenticated.
// Not here: admin, edit and view (and their system:aggregate-to-* parts), the system:controller:*,
// system:node* and system:kube-* roles of components the lab does not run.
//
// And kube-controller-manager's ClusterRole aggregation controller: a ClusterRole with an
// aggregationRule gets, as its rules, the rules of every ClusterRole its selectors match (in name
// order, each rule once), kept up to date as those change.

import (
	"context"
	"sort"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

func bootstrapMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        name,
		Labels:      map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"},
		Annotations: map[string]string{rbacv1.AutoUpdateAnnotationKey: "true"},
	}
}

func bootstrapClusterRoles() []rbacv1.ClusterRole {
	get := []string{"get"}
	return []rbacv1.ClusterRole{
		{ObjectMeta: bootstrapMeta("cluster-admin"), Rules: []rbacv1.PolicyRule{
			{Verbs: []string{rbacv1.VerbAll}, APIGroups: []string{rbacv1.APIGroupAll}, Resources: []string{rbacv1.ResourceAll}},
			{Verbs: []string{rbacv1.VerbAll}, NonResourceURLs: []string{rbacv1.NonResourceAll}},
		}},
		{ObjectMeta: bootstrapMeta("system:discovery"), Rules: []rbacv1.PolicyRule{
			{Verbs: get, NonResourceURLs: []string{"/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
				"/readyz", "/version", "/version/"}},
		}},
		{ObjectMeta: bootstrapMeta("system:basic-user"), Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews", "selfsubjectrulesreviews"}},
			{Verbs: []string{"create"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}},
		}},
		{ObjectMeta: bootstrapMeta("system:public-info-viewer"), Rules: []rbacv1.PolicyRule{
			{Verbs: get, NonResourceURLs: []string{"/healthz", "/livez", "/readyz", "/version", "/version/"}},
		}},
	}
}

func bootstrapClusterRoleBindings() []rbacv1.ClusterRoleBinding {
	groups := func(names ...string) []rbacv1.Subject {
		var subjects []rbacv1.Subject
		for _, name := range names {
			subjects = append(subjects, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name})
		}
		return subjects
	}
	binding := func(role string, subjects []rbacv1.Subject) rbacv1.ClusterRoleBinding {
		return rbacv1.ClusterRoleBinding{ObjectMeta: bootstrapMeta(role), Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
	}
	return []rbacv1.ClusterRoleBinding{
		binding("cluster-admin", groups("system:masters")),
		binding("system:discovery", groups("system:authenticated")),
		binding("system:basic-user", groups("system:authenticated")),
		binding("system:public-info-viewer", groups("system:authenticated", "system:unauthenticated")),
	}
}

// createBootstrapPolicy creates each bootstrap role and binding that is missing (a post-start hook:
// /readyz waits for it).
func createBootstrapPolicy(ctx context.Context, config *rest.Config) error {
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	for _, role := range bootstrapClusterRoles() {
		if _, err := client.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	for _, binding := range bootstrapClusterRoleBindings() {
		if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// runClusterRoleAggregation keeps every aggregated ClusterRole's rules (until ctx ends).
func runClusterRoleAggregation(ctx context.Context, factory informers.SharedInformerFactory, config *rest.Config) {
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		klog.Errorf("clusterrole aggregation: %v", err)
		return
	}
	informer := factory.Rbac().V1().ClusterRoles()
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { poke() }, UpdateFunc: func(any, any) { poke() }, DeleteFunc: func(any) { poke() },
	}); err != nil {
		klog.Errorf("clusterrole aggregation: %v", err)
		return
	}
	if !cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		roles, err := informer.Lister().List(labels.Everything())
		if err == nil {
			err = aggregateAll(ctx, client, roles)
		}
		if err != nil {
			klog.V(2).Infof("clusterrole aggregation: %v (retrying)", err)
			time.Sleep(time.Second)
			poke()
		}
	}
}

func aggregateAll(ctx context.Context, client kubernetes.Interface, roles []*rbacv1.ClusterRole) error {
	for _, role := range roles {
		if role.AggregationRule == nil {
			continue
		}
		rules, err := aggregatedRules(role, roles)
		if err != nil {
			return err
		}
		if apiequality.Semantic.DeepEqual(rules, role.Rules) {
			continue
		}
		updated := role.DeepCopy()
		updated.Rules = rules
		if _, err := client.RbacV1().ClusterRoles().Update(ctx, updated, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// aggregatedRules: the rules of the ClusterRoles the aggregation rule selects, in name order, each once.
func aggregatedRules(role *rbacv1.ClusterRole, all []*rbacv1.ClusterRole) ([]rbacv1.PolicyRule, error) {
	selected := map[string]*rbacv1.ClusterRole{}
	for _, s := range role.AggregationRule.ClusterRoleSelectors {
		selector, err := metav1.LabelSelectorAsSelector(&s)
		if err != nil {
			return nil, err
		}
		for _, candidate := range all {
			if candidate.Name != role.Name && selector.Matches(labels.Set(candidate.Labels)) {
				selected[candidate.Name] = candidate
			}
		}
	}
	names := make([]string, 0, len(selected))
	for name := range selected {
		names = append(names, name)
	}
	sort.Strings(names)
	rules := []rbacv1.PolicyRule{}
	for _, name := range names {
		for _, rule := range selected[name].Rules {
			if !containsRule(rules, rule) {
				rules = append(rules, *rule.DeepCopy())
			}
		}
	}
	return rules, nil
}

func containsRule(rules []rbacv1.PolicyRule, rule rbacv1.PolicyRule) bool {
	for _, r := range rules {
		if apiequality.Semantic.DeepEqual(r, rule) {
			return true
		}
	}
	return false
}
