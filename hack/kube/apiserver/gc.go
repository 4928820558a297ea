package main

// A minimal garbage collector, doing what kube-controller-manager's would for the objects here:
//   - an object whose owners are all gone is deleted (in the background);
//   - owner references to owners that are gone are removed when another owner remains;
//   - "foregroundDeletion": the owner's dependents are deleted, then its finalizer removed;
//   - "orphan": the owner's references are removed from its dependents, then its finalizer;
//   - objects left in a deleted namespace are deleted (there is no namespace controller).
// An owner or namespace counts as gone only when the server answers 404 (or a different uid) to a
// direct read: a missing entry in a list that raced with a create is not proof.
//
// It sweeps every --gc-interval seconds over metadata-only lists of every listable resource.

import (
	"context"
	"encoding/json"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/klog/v2"
)

const (
	finalizerForeground = metav1.FinalizerDeleteDependents
	finalizerOrphan     = metav1.FinalizerOrphanDependents
)

type item struct {
	gvr        schema.GroupVersionResource
	namespaced bool
	meta       metav1.ObjectMeta
}

type collector struct {
	client    metadata.Interface
	discovery discovery.CachedDiscoveryInterface
	mapper    *restmapper.DeferredDiscoveryRESTMapper
}

func runGarbageCollector(ctx context.Context, config *rest.Config, interval float64) {
	client, err := metadata.NewForConfig(config)
	if err != nil {
		klog.Errorf("garbage collector: %v", err)
		return
	}
	disco, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		klog.Errorf("garbage collector: %v", err)
		return
	}
	cached := memory.NewMemCacheClient(disco)
	c := &collector{client: client, discovery: cached, mapper: restmapper.NewDeferredDiscoveryRESTMapper(cached)}
	sweeps := 0
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if sweeps%10 == 0 { // new CRDs appear within ten sweeps
			c.mapper.Reset()
		}
		sweeps++
		if err := c.sweep(ctx); err != nil {
			klog.V(2).Infof("garbage collector: %v", err)
		}
	}, time.Duration(interval*float64(time.Second)))
}

func (c *collector) sweep(ctx context.Context) error {
	items, err := c.listAll(ctx)
	if err != nil {
		return err
	}
	uids := sets.New[types.UID]()
	namespaces := sets.New[string]()
	dependents := map[types.UID][]item{}
	for _, it := range items {
		uids.Insert(it.meta.UID)
		if it.gvr.Group == "" && it.gvr.Resource == "namespaces" {
			namespaces.Insert(it.meta.Name)
		}
		for _, ref := range it.meta.OwnerReferences {
			dependents[ref.UID] = append(dependents[ref.UID], it)
		}
	}
	for _, it := range items {
		switch {
		case it.meta.DeletionTimestamp != nil && hasFinalizer(it, finalizerForeground):
			c.deleteForeground(ctx, it, dependents[it.meta.UID])
		case it.meta.DeletionTimestamp != nil && hasFinalizer(it, finalizerOrphan):
			c.orphan(ctx, it, dependents[it.meta.UID])
		case it.namespaced && !namespaces.Has(it.meta.Namespace):
			c.deleteIfNamespaceGone(ctx, it)
		case len(it.meta.OwnerReferences) > 0:
			c.collectIfOwnersGone(ctx, it, uids)
		}
	}
	return nil
}

func (c *collector) listAll(ctx context.Context) ([]item, error) {
	lists, err := c.discovery.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		return nil, err
	}
	var items []item
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if !sets.New(r.Verbs...).HasAll("list", "delete") {
				continue
			}
			gvr := gv.WithResource(r.Name)
			objs, err := c.client.Resource(gvr).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				if apierrors.IsNotFound(err) { // a CRD just removed
					c.discovery.Invalidate()
				}
				continue
			}
			for _, obj := range objs.Items {
				items = append(items, item{gvr: gvr, namespaced: r.Namespaced, meta: obj.ObjectMeta})
			}
		}
	}
	return items, nil
}

func hasFinalizer(it item, name string) bool {
	return sets.New(it.meta.Finalizers...).Has(name)
}

// deleteForeground deletes an owner's dependents and, once none is left, lets the owner go.
func (c *collector) deleteForeground(ctx context.Context, owner item, deps []item) {
	if len(deps) == 0 {
		c.removeFinalizer(ctx, owner, finalizerForeground)
		return
	}
	for _, dep := range deps {
		if dep.meta.DeletionTimestamp == nil {
			c.delete(ctx, dep, metav1.DeletePropagationForeground)
		}
	}
}

// orphan removes the owner's reference from each dependent, then lets the owner go.
func (c *collector) orphan(ctx context.Context, owner item, deps []item) {
	for _, dep := range deps {
		if err := c.setOwners(ctx, dep, without(dep.meta.OwnerReferences, sets.New(owner.meta.UID))); err != nil {
			return
		}
	}
	c.removeFinalizer(ctx, owner, finalizerOrphan)
}

func (c *collector) collectIfOwnersGone(ctx context.Context, it item, uids sets.Set[types.UID]) {
	gone := sets.New[types.UID]()
	for _, ref := range it.meta.OwnerReferences {
		if !uids.Has(ref.UID) && c.ownerGone(ctx, it, ref) {
			gone.Insert(ref.UID)
		}
	}
	switch {
	case gone.Len() == 0:
	case gone.Len() == len(it.meta.OwnerReferences):
		c.delete(ctx, it, metav1.DeletePropagationBackground)
	default:
		_ = c.setOwners(ctx, it, without(it.meta.OwnerReferences, gone))
	}
}

// ownerGone: true only on the server's answer that the owner does not exist (404, or another
// object of that name with a different uid).
func (c *collector) ownerGone(ctx context.Context, it item, ref metav1.OwnerReference) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return false
	}
	mapping, err := c.mapper.RESTMapping(gv.WithKind(ref.Kind).GroupKind(), gv.Version)
	if meta.IsNoMatchError(err) {
		// the cached discovery may predate the owner's CRD: only fresh discovery's answer counts
		c.mapper.Reset()
		mapping, err = c.mapper.RESTMapping(gv.WithKind(ref.Kind).GroupKind(), gv.Version)
	}
	if err != nil {
		// an owner kind no longer served (its CRD deleted) has no objects left
		return meta.IsNoMatchError(err)
	}
	resource := c.client.Resource(mapping.Resource)
	var owner *metav1.PartialObjectMetadata
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		owner, err = resource.Namespace(it.meta.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	} else {
		owner, err = resource.Get(ctx, ref.Name, metav1.GetOptions{})
	}
	if err != nil {
		return apierrors.IsNotFound(err)
	}
	return owner.UID != ref.UID
}

func (c *collector) deleteIfNamespaceGone(ctx context.Context, it item) {
	_, err := c.client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).
		Get(ctx, it.meta.Namespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.delete(ctx, it, metav1.DeletePropagationBackground)
	}
}

func (c *collector) delete(ctx context.Context, it item, policy metav1.DeletionPropagation) {
	uid := it.meta.UID
	options := metav1.DeleteOptions{PropagationPolicy: &policy, Preconditions: &metav1.Preconditions{UID: &uid}}
	err := c.resource(it).Delete(ctx, it.meta.Name, options)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.Warningf("garbage collector: deleting %s %s/%s: %v", it.gvr.Resource, it.meta.Namespace, it.meta.Name, err)
	}
}

func (c *collector) removeFinalizer(ctx context.Context, it item, name string) {
	kept := []string{}
	for _, f := range it.meta.Finalizers {
		if f != name {
			kept = append(kept, f)
		}
	}
	_ = c.mergePatch(ctx, it, map[string]any{"finalizers": kept})
}

func (c *collector) setOwners(ctx context.Context, it item, refs []metav1.OwnerReference) error {
	if refs == nil {
		refs = []metav1.OwnerReference{}
	}
	return c.mergePatch(ctx, it, map[string]any{"ownerReferences": refs})
}

// mergePatch patches metadata on the version we saw (a concurrent change makes it a 409, and the
// next sweep looks again).
func (c *collector) mergePatch(ctx context.Context, it item, metadataPatch map[string]any) error {
	metadataPatch["uid"] = it.meta.UID
	metadataPatch["resourceVersion"] = it.meta.ResourceVersion
	body, err := json.Marshal(map[string]any{"metadata": metadataPatch})
	if err != nil {
		return err
	}
	_, err = c.resource(it).Patch(ctx, it.meta.Name, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.Warningf("garbage collector: patching %s %s/%s: %v", it.gvr.Resource, it.meta.Namespace, it.meta.Name, err)
	}
	return err
}

func (c *collector) resource(it item) metadata.ResourceInterface {
	if it.namespaced {
		return c.client.Resource(it.gvr).Namespace(it.meta.Namespace)
	}
	return c.client.Resource(it.gvr)
}

func without(refs []metav1.OwnerReference, uids sets.Set[types.UID]) []metav1.OwnerReference {
	var kept []metav1.OwnerReference
	for _, ref := range refs {
		if !uids.Has(ref.UID) {
			kept = append(kept, ref)
		}
	}
	return kept
}
