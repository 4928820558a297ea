package main

// Unit tests of the lab's Service resolver for admission webhooks (webhooks.go); hack/kube/up.sh runs them
// when it builds the server. tests/cluster/test_lab_admission.py has the cluster lab's server call real ones.

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	corelisters "k8s.io/client-go/listers/core/v1"
)

func resolverOf(t *testing.T, objects ...interface{}) *labServiceResolver {
	services := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, obj := range objects {
		var err error
		switch obj.(type) {
		case *corev1.Service:
			err = services.Add(obj)
		case *corev1.Pod:
			err = pods.Add(obj)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return &labServiceResolver{services: corelisters.NewServiceLister(services), pods: corelisters.NewPodLister(pods)}
}

func webhookPod(name, ip string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "slinky", Labels: map[string]string{"app": "hooks"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "admission",
			Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 9443}}}}},
		Status: corev1.PodStatus{PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

func TestResolveEndpoint(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hooks", Namespace: "slinky"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "hooks"}, Ports: []corev1.ServicePort{
			{Port: 443, TargetPort: intstr.FromString("https")},
			{Port: 80, TargetPort: intstr.FromInt32(8080)},
			{Port: 81},
		}},
	}
	resolver := resolverOf(t, svc, webhookPod("a", "10.77.0.20", false), webhookPod("b", "10.77.0.21", true))
	for port, want := range map[int32]string{443: "https://10.77.0.21:9443", 80: "https://10.77.0.21:8080", 81: "https://10.77.0.21:81"} {
		got, err := resolver.ResolveEndpoint("slinky", "hooks", port)
		if err != nil || got.String() != want {
			t.Errorf("port %d: got %v, %v; want %s", port, got, err, want)
		}
	}
	for _, c := range []struct {
		namespace, name string
		port            int32
		want            string
	}{
		{"slinky", "hooks", 444, "has no port 444"},
		{"slinky", "nothing", 443, "not found"},
		{"other", "hooks", 443, "not found"},
	} {
		if _, err := resolver.ResolveEndpoint(c.namespace, c.name, c.port); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s/%s:%d: got %v, want an error saying %q", c.namespace, c.name, c.port, err, c.want)
		}
	}
	none := resolverOf(t, svc, webhookPod("a", "10.77.0.20", false))
	if _, err := none.ResolveEndpoint("slinky", "hooks", 443); err == nil || !strings.Contains(err.Error(), "no ready endpoint") {
		t.Errorf("no ready pod: got %v, want no ready endpoint", err)
	}
}
