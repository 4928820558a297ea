package main

// What kube-apiserver's own controllers would provide: the system namespaces, and custom resource
// groups in the un-aggregated /apis list (kube-apiserver's aggregator lists them there).

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	extensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	extensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apiserver/pkg/endpoints/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

var systemNamespaces = []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease}

func createSystemNamespaces(ctx context.Context, config *rest.Config) error {
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	for _, name := range systemNamespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

func groupFor(versions ...schema.GroupVersion) metav1.APIGroup {
	group := metav1.APIGroup{Name: versions[0].Group}
	for _, gv := range versions {
		group.Versions = append(group.Versions, metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version})
	}
	group.PreferredVersion = group.Versions[0]
	return group
}

// runCRDGroups keeps one /apis entry per custom resource group, listing its served versions.
func runCRDGroups(ctx context.Context, config *rest.Config, groups discovery.GroupManager) {
	client, err := extensionsclient.NewForConfig(config)
	if err != nil {
		klog.Errorf("crd discovery: %v", err)
		return
	}
	factory := extensionsinformers.NewSharedInformerFactory(client, 0)
	informer := factory.Apiextensions().V1().CustomResourceDefinitions()
	listed := map[string]bool{}
	sync := func() {
		crds, err := informer.Lister().List(labels.Everything())
		if err != nil {
			return
		}
		current := servedCRDVersions(crds)
		for name := range listed {
			if _, ok := current[name]; !ok {
				groups.RemoveGroup(name)
				delete(listed, name)
			}
		}
		for _, versions := range current {
			groups.AddGroup(groupFor(versions...))
			listed[versions[0].Group] = true
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { sync() },
		UpdateFunc: func(any, any) { sync() },
		DeleteFunc: func(any) { sync() },
	}
	if _, err := informer.Informer().AddEventHandler(handler); err != nil {
		klog.Errorf("crd discovery: %v", err)
		return
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
}

// servedCRDVersions: group -> served versions, most preferred first (kube's version order).
func servedCRDVersions(crds []*apiextensionsv1.CustomResourceDefinition) map[string][]schema.GroupVersion {
	byGroup := map[string]map[string]bool{}
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			if byGroup[crd.Spec.Group] == nil {
				byGroup[crd.Spec.Group] = map[string]bool{}
			}
			byGroup[crd.Spec.Group][v.Name] = true
		}
	}
	result := map[string][]schema.GroupVersion{}
	for group, versions := range byGroup {
		names := make([]string, 0, len(versions))
		for v := range versions {
			names = append(names, v)
		}
		sort.Slice(names, func(i, j int) bool { return version.CompareKubeAwareVersionStrings(names[i], names[j]) > 0 })
		for _, v := range names {
			result[group] = append(result[group], schema.GroupVersion{Group: group, Version: v})
		}
	}
	return result
}
