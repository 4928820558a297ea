// Admission webhooks, called as kube-apiserver calls them: k8s.io/apiserver's MutatingAdmissionWebhook and
// ValidatingAdmissionWebhook plugins, fed the stored Mutating- and ValidatingWebhookConfigurations, with
// their own client (TLS verified against each webhook's caBundle, for a Service as <name>.<namespace>.svc).
//
// What kube-apiserver needs a cluster network for, a Service reference, is resolved here as kube-proxy would
// route it, from the Service and its pods (the lab has neither ClusterIPs nor an endpoints controller): the
// Service's port mapped to its targetPort (a port name looked up in the pod's containers), at the address of
// the first ready pod its selector picks. The cluster lab's pods are on its bridge, which this host process
// reaches; none ready, and the call fails as one to a Service without endpoints does (the webhook's
// failurePolicy decides then).
package main

import (
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	webhookinit "k8s.io/apiserver/pkg/admission/plugin/webhook/initializer"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// labServiceResolver resolves a Service port to a ready endpoint's address and target port.
type labServiceResolver struct {
	services corelisters.ServiceLister
	pods     corelisters.PodLister
}

func newLabServiceResolver(factory informers.SharedInformerFactory) *labServiceResolver {
	return &labServiceResolver{
		services: factory.Core().V1().Services().Lister(),
		pods:     factory.Core().V1().Pods().Lister(),
	}
}

func (r *labServiceResolver) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	svc, err := r.services.Services(namespace).Get(name)
	if err != nil {
		return nil, fmt.Errorf("service %s/%s: %w", namespace, name, err)
	}
	var svcPort *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Port == port {
			svcPort = &svc.Spec.Ports[i]
		}
	}
	if svcPort == nil {
		return nil, fmt.Errorf("service %s/%s has no port %d", namespace, name, port)
	}
	if len(svc.Spec.Selector) == 0 {
		return nil, fmt.Errorf("service %s/%s has no selector: the lab resolves only selected pods", namespace, name)
	}
	pods, err := r.pods.Pods(namespace).List(labels.SelectorFromSet(svc.Spec.Selector))
	if err != nil {
		return nil, err
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || !podReady(pod) {
			continue
		}
		target, ok := targetPort(pod, svcPort.TargetPort, port)
		if !ok {
			continue
		}
		return &url.URL{Scheme: "https", Host: net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(target)))}, nil
	}
	return nil, fmt.Errorf("service %s/%s port %d has no ready endpoint", namespace, name, port)
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// targetPort: the Service port's target in this pod (an unset target is the Service port itself).
func targetPort(pod *corev1.Pod, target intstr.IntOrString, port int32) (int32, bool) {
	switch {
	case target.Type == intstr.Int && target.IntVal == 0:
		return port, true
	case target.Type == intstr.Int:
		return target.IntVal, true
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == target.StrVal {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

// webhookInitializer gives the webhook plugins the lab's Service resolver and the default credentials
// resolver (no kubeconfig: the API server presents no client certificate to webhooks, as by default).
func webhookInitializer(factory informers.SharedInformerFactory) *webhookinit.PluginInitializer {
	var wrapper webhook.AuthenticationInfoResolverWrapper
	return webhookinit.NewPluginInitializer(wrapper, newLabServiceResolver(factory))
}
