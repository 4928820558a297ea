package main

// Unit tests of the RBAC matcher and resolver (rbac.go), the aggregation of ClusterRoles
// (bootstrap.go) and the escalation message (rbacstore.go). hack/kube/up.sh runs them when it builds
// the server (a failure fails the build); tests/kube/test_rbac.py covers the same rules through the API.

import (
	"context"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

func resourceRequest(verb, group, resource, subresource, namespace, name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{Verb: verb, APIGroup: group, Resource: resource, Subresource: subresource,
		Namespace: namespace, Name: name, ResourceRequest: true}
}

func pathRequest(verb, path string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{Verb: verb, Path: path}
}

func TestRuleAllows(t *testing.T) {
	pods := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "patch"}}
	status := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}}
	anyScale := rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"*/scale"}, Verbs: []string{"update"}}
	everything := rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}
	named := rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"mine"},
		Verbs: []string{"get", "update", "create", "list"}}
	urls := rbacv1.PolicyRule{NonResourceURLs: []string{"/healthz", "/apis/*"}, Verbs: []string{"get"}}
	cases := []struct {
		name  string
		rule  rbacv1.PolicyRule
		attrs authorizer.AttributesRecord
		want  bool
	}{
		{"verb listed", pods, resourceRequest("patch", "", "pods", "", "ns", "p"), true},
		{"verb not listed", pods, resourceRequest("delete", "", "pods", "", "ns", "p"), false},
		{"other group", pods, resourceRequest("get", "apps", "pods", "", "ns", "p"), false},
		{"other resource", pods, resourceRequest("get", "", "nodes", "", "", "n"), false},
		{"a resource does not grant its subresource", pods, resourceRequest("patch", "", "pods", "status", "ns", "p"), false},
		{"the subresource", status, resourceRequest("patch", "", "pods", "status", "ns", "p"), true},
		{"a subresource does not grant its resource", status, resourceRequest("patch", "", "pods", "", "ns", "p"), false},
		{"*/scale matches any resource's scale", anyScale, resourceRequest("update", "apps", "statefulsets", "scale", "ns", "s"), true},
		{"*/scale is not the resource", anyScale, resourceRequest("update", "apps", "statefulsets", "", "ns", "s"), false},
		{"*/scale is not another subresource", anyScale, resourceRequest("update", "apps", "statefulsets", "status", "ns", "s"), false},
		{"* covers subresources", everything, resourceRequest("create", "", "pods", "binding", "ns", "p"), true},
		{"* covers any group", everything, resourceRequest("delete", "slinky.slurm.net", "nodesets", "", "ns", "x"), true},
		{"* does not cover a path", everything, pathRequest("get", "/healthz"), false},
		{"resourceNames: the name", named, resourceRequest("update", "coordination.k8s.io", "leases", "", "ns", "mine"), true},
		{"resourceNames: another name", named, resourceRequest("update", "coordination.k8s.io", "leases", "", "ns", "theirs"), false},
		{"resourceNames: a create names nothing", named, resourceRequest("create", "coordination.k8s.io", "leases", "", "ns", ""), false},
		{"resourceNames: a list names nothing", named, resourceRequest("list", "coordination.k8s.io", "leases", "", "ns", ""), false},
		{"URL exact", urls, pathRequest("get", "/healthz"), true},
		{"URL exact is not a prefix", urls, pathRequest("get", "/healthz/ping"), false},
		{"URL prefix with *", urls, pathRequest("get", "/apis/apps/v1"), true},
		{"URL prefix with * not its parent", urls, pathRequest("get", "/apis"), false},
		{"URL other verb", urls, pathRequest("post", "/healthz"), false},
		{"URL rule does not match a resource", urls, resourceRequest("get", "", "pods", "", "ns", "p"), false},
		{"* URL", rbacv1.PolicyRule{NonResourceURLs: []string{"*"}, Verbs: []string{"*"}}, pathRequest("delete", "/anything"), true},
	}
	for _, c := range cases {
		if got := ruleAllows(c.attrs, &c.rule); got != c.want {
			t.Errorf("%s: ruleAllows = %v, want %v", c.name, got, c.want)
		}
	}
}

// staticObjects: roles and bindings from a table.
type staticObjects struct {
	clusterRoleBindings []*rbacv1.ClusterRoleBinding
	roleBindings        []*rbacv1.RoleBinding
	clusterRoles        []*rbacv1.ClusterRole
	roles               []*rbacv1.Role
}

func (s staticObjects) ClusterRoleBindings() ([]*rbacv1.ClusterRoleBinding, error) {
	return s.clusterRoleBindings, nil
}

func (s staticObjects) RoleBindings(namespace string) ([]*rbacv1.RoleBinding, error) {
	var out []*rbacv1.RoleBinding
	for _, b := range s.roleBindings {
		if b.Namespace == namespace {
			out = append(out, b)
		}
	}
	return out, nil
}

func (s staticObjects) ClusterRole(name string) (*rbacv1.ClusterRole, error) {
	for _, r := range s.clusterRoles {
		if r.Name == name {
			return r, nil
		}
	}
	return nil, apierrors.NewNotFound(rbacv1.Resource("clusterrole"), name)
}

func (s staticObjects) Role(namespace, name string) (*rbacv1.Role, error) {
	for _, r := range s.roles {
		if r.Namespace == namespace && r.Name == name {
			return r, nil
		}
	}
	return nil, apierrors.NewNotFound(rbacv1.Resource("role"), name)
}

func objMeta(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}

func TestAuthorizeBindings(t *testing.T) {
	podsRule := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}}
	nodesRule := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}}
	objects := staticObjects{
		clusterRoles: []*rbacv1.ClusterRole{
			{ObjectMeta: objMeta("", "nodes-reader"), Rules: []rbacv1.PolicyRule{nodesRule}},
			{ObjectMeta: objMeta("", "pod-patcher"), Rules: []rbacv1.PolicyRule{podsRule}},
		},
		roles: []*rbacv1.Role{{ObjectMeta: objMeta("work", "pods"), Rules: []rbacv1.PolicyRule{podsRule}}},
		clusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			{ObjectMeta: objMeta("", "sa-nodes"), RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "nodes-reader"},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "ops", Name: "sync"}}},
			{ObjectMeta: objMeta("", "group-nodes"), RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "nodes-reader"},
				Subjects: []rbacv1.Subject{{Kind: "Group", Name: "readers"}}},
			{ObjectMeta: objMeta("", "dangling"), RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "missing"},
				Subjects: []rbacv1.Subject{{Kind: "User", Name: "dora"}}},
		},
		roleBindings: []*rbacv1.RoleBinding{
			// a Role in its namespace, to a ServiceAccount of another namespace
			{ObjectMeta: objMeta("work", "sync-pods"), RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "pods"},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "ops", Name: "sync"}}},
			// a ClusterRole granted in one namespace; the ServiceAccount subject's namespace defaults to the binding's
			{ObjectMeta: objMeta("other", "local-sa"), RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "pod-patcher"},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "builder"}}},
			{ObjectMeta: objMeta("other", "user"), RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "pod-patcher"},
				Subjects: []rbacv1.Subject{{Kind: "User", Name: "alice"}}},
		},
	}
	sa := func(ns, name string) user.Info {
		return &user.DefaultInfo{Name: "system:serviceaccount:" + ns + ":" + name,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	}
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}
	reader := &user.DefaultInfo{Name: "bob", Groups: []string{"readers"}}
	dora := &user.DefaultInfo{Name: "dora"}
	patch := func(ns string) authorizer.AttributesRecord { return resourceRequest("patch", "", "pods", "", ns, "p") }
	listNodes := resourceRequest("list", "", "nodes", "", "", "")
	cases := []struct {
		name  string
		user  user.Info
		attrs authorizer.AttributesRecord
		want  bool
	}{
		{"ClusterRoleBinding to a ServiceAccount", sa("ops", "sync"), listNodes, true},
		{"the same name in another namespace is another ServiceAccount", sa("work", "sync"), listNodes, false},
		{"ClusterRoleBinding to a Group", reader, listNodes, true},
		{"a Role grants in its namespace", sa("ops", "sync"), patch("work"), true},
		{"a Role grants nothing elsewhere", sa("ops", "sync"), patch("other"), false},
		{"a RoleBinding grants nothing cluster-wide", sa("ops", "sync"), patch(""), false},
		{"a RoleBinding's ServiceAccount subject defaults to its namespace", sa("other", "builder"), patch("other"), true},
		{"... and is not a ServiceAccount of another namespace", sa("work", "builder"), patch("other"), false},
		{"RoleBinding of a ClusterRole to a User", alice, patch("other"), true},
		{"... only in that namespace", alice, patch("work"), false},
		{"a binding of a missing role grants nothing", dora, listNodes, false},
	}
	r := &rbacAuthorizer{objects: objects}
	for _, c := range cases {
		c.attrs.User = c.user
		decision, reason, err := r.Authorize(context.Background(), c.attrs)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if got := decision == authorizer.DecisionAllow; got != c.want {
			t.Errorf("%s: allowed = %v (%s), want %v", c.name, got, reason, c.want)
		}
		if !c.want && decision != authorizer.DecisionNoOpinion {
			t.Errorf("%s: a refusal is NoOpinion (the union's next authorizer may allow), not %v", c.name, decision)
		}
	}
	_, reason, _ := r.Authorize(context.Background(), authorizer.AttributesRecord{User: dora, Verb: "list", Resource: "nodes", ResourceRequest: true})
	if !strings.Contains(reason, `clusterrole.rbac.authorization.k8s.io "missing" not found`) {
		t.Errorf("a missing role is named in the reason: %q", reason)
	}
	rules, _, _, _ := r.RulesFor(context.Background(), sa("ops", "sync"), "work")
	if len(rules) != 2 {
		t.Errorf("RulesFor: the ClusterRole's rule and the Role's, got %d", len(rules))
	}
}

func TestAggregatedRules(t *testing.T) {
	a := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}
	b := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}
	label := map[string]string{"aggregate-to-x": "true"}
	aggregated := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: label},
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: label}}}}
	all := []*rbacv1.ClusterRole{
		aggregated,
		{ObjectMeta: metav1.ObjectMeta{Name: "z-part", Labels: label}, Rules: []rbacv1.PolicyRule{b, a}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a-part", Labels: label}, Rules: []rbacv1.PolicyRule{a}},
		{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled"}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"*"}}}},
	}
	rules, err := aggregatedRules(aggregated, all)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 2 || rules[0].Resources[0] != "pods" || rules[1].Resources[0] != "nodes" {
		t.Errorf("in name order, each rule once: %v", rules)
	}
}

func TestCompactRule(t *testing.T) {
	got := compactRule(rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"delete", "get"}})
	if want := `{APIGroups:[""], Resources:["nodes"], Verbs:["delete" "get"]}`; got != want {
		t.Errorf("compactRule = %s, want %s", got, want)
	}
}
