package main

// The built-in kinds we serve, their scheme and their storage.

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/apiserver/pkg/storage/names"
)

// kind is one served built-in resource.
type kind struct {
	gv         schema.GroupVersion
	kind       string
	resource   string
	namespaced bool
	status     bool // has a status subresource (the main resource ignores status writes)
	// keepStatus: status given on create is stored (kubelets register Nodes with their status).
	keepStatus bool
	shortNames []string
	// returnDeleted: DELETE answers with the object (as kube-apiserver does for these), not a Status.
	returnDeleted bool
	// fields: the field selectors the kind supports beyond metadata.name/namespace.
	fields func(obj runtime.Object) fields.Set
	// created: server-side settings on create (pods start Pending, namespaces Active, ...).
	created func(obj runtime.Object)
}

var kinds = []*kind{
	{gv: corev1.SchemeGroupVersion, kind: "Namespace", resource: "namespaces", status: true, shortNames: []string{"ns"},
		fields: namespaceFields, created: func(o runtime.Object) { o.(*corev1.Namespace).Status.Phase = corev1.NamespaceActive }},
	{gv: corev1.SchemeGroupVersion, kind: "Pod", resource: "pods", namespaced: true, status: true, shortNames: []string{"po"}, returnDeleted: true,
		fields: podFields, created: func(o runtime.Object) { o.(*corev1.Pod).Status.Phase = corev1.PodPending }},
	{gv: corev1.SchemeGroupVersion, kind: "Service", resource: "services", namespaced: true, status: true, shortNames: []string{"svc"},
		returnDeleted: true},
	{gv: corev1.SchemeGroupVersion, kind: "ConfigMap", resource: "configmaps", namespaced: true, shortNames: []string{"cm"}},
	{gv: corev1.SchemeGroupVersion, kind: "Secret", resource: "secrets", namespaced: true, fields: secretFields},
	{gv: corev1.SchemeGroupVersion, kind: "ServiceAccount", resource: "serviceaccounts", namespaced: true, shortNames: []string{"sa"}},
	{gv: corev1.SchemeGroupVersion, kind: "PersistentVolumeClaim", resource: "persistentvolumeclaims", namespaced: true,
		status: true, shortNames: []string{"pvc"}, returnDeleted: true,
		created: func(o runtime.Object) { o.(*corev1.PersistentVolumeClaim).Status.Phase = corev1.ClaimPending }},
	{gv: corev1.SchemeGroupVersion, kind: "Node", resource: "nodes", status: true, keepStatus: true, shortNames: []string{"no"},
		fields: nodeFields},
	{gv: corev1.SchemeGroupVersion, kind: "Event", resource: "events", namespaced: true, shortNames: []string{"ev"},
		fields: eventFields},
	{gv: appsv1.SchemeGroupVersion, kind: "StatefulSet", resource: "statefulsets", namespaced: true, status: true, shortNames: []string{"sts"}},
	{gv: appsv1.SchemeGroupVersion, kind: "Deployment", resource: "deployments", namespaced: true, status: true, shortNames: []string{"deploy"}},
	{gv: appsv1.SchemeGroupVersion, kind: "DaemonSet", resource: "daemonsets", namespaced: true, status: true, shortNames: []string{"ds"}},
	{gv: appsv1.SchemeGroupVersion, kind: "ReplicaSet", resource: "replicasets", namespaced: true, status: true, shortNames: []string{"rs"}},
	{gv: batchv1.SchemeGroupVersion, kind: "Job", resource: "jobs", namespaced: true, status: true},
	{gv: policyv1.SchemeGroupVersion, kind: "PodDisruptionBudget", resource: "poddisruptionbudgets", namespaced: true,
		status: true, shortNames: []string{"pdb"}},
	{gv: coordinationv1.SchemeGroupVersion, kind: "Lease", resource: "leases", namespaced: true},
	{gv: eventsv1.SchemeGroupVersion, kind: "Event", resource: "events", namespaced: true, shortNames: []string{"ev"}},
	{gv: rbacv1.SchemeGroupVersion, kind: "Role", resource: "roles", namespaced: true},
	{gv: rbacv1.SchemeGroupVersion, kind: "RoleBinding", resource: "rolebindings", namespaced: true},
	{gv: rbacv1.SchemeGroupVersion, kind: "ClusterRole", resource: "clusterroles"},
	{gv: rbacv1.SchemeGroupVersion, kind: "ClusterRoleBinding", resource: "clusterrolebindings"},
	{gv: schedulingv1.SchemeGroupVersion, kind: "PriorityClass", resource: "priorityclasses", shortNames: []string{"pc"}},
	{gv: networkingv1.SchemeGroupVersion, kind: "NetworkPolicy", resource: "networkpolicies", namespaced: true, shortNames: []string{"netpol"}},
	{gv: admissionregistrationv1.SchemeGroupVersion, kind: "MutatingWebhookConfiguration", resource: "mutatingwebhookconfigurations"},
	{gv: admissionregistrationv1.SchemeGroupVersion, kind: "ValidatingWebhookConfiguration", resource: "validatingwebhookconfigurations"},
	// DRA: the bridge's claims for Slurm's devices, and the devices the drivers publish per node
	{gv: resourcev1.SchemeGroupVersion, kind: "ResourceClaim", resource: "resourceclaims", namespaced: true, status: true},
	{gv: resourcev1.SchemeGroupVersion, kind: "ResourceSlice", resource: "resourceslices", fields: resourceSliceFields},
	{gv: resourcev1.SchemeGroupVersion, kind: "DeviceClass", resource: "deviceclasses"},
}

var (
	builtinScheme = runtime.NewScheme()
	builtinCodecs = serializer.NewCodecFactory(builtinScheme)
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme, coordinationv1.AddToScheme,
		eventsv1.AddToScheme, rbacv1.AddToScheme, schedulingv1.AddToScheme, networkingv1.AddToScheme,
		admissionregistrationv1.AddToScheme, resourcev1.AddToScheme, authenticationv1.AddToScheme, authorizationv1.AddToScheme,
	} {
		utilruntime.Must(add(builtinScheme))
	}
	// The versioned types are also their own internal version: with no internal types packaged,
	// "conversion" between the two is the identity, and storage holds exactly what was served.
	for _, gv := range append(servedGroupVersions(), reviewGroupVersions...) {
		internal := schema.GroupVersion{Group: gv.Group, Version: runtime.APIVersionInternal}
		for name, t := range builtinScheme.KnownTypes(gv) {
			if strings.HasPrefix(t.PkgPath(), "k8s.io/api/") && !builtinScheme.Recognizes(internal.WithKind(name)) {
				builtinScheme.AddKnownTypeWithName(internal.WithKind(name), reflect.New(t).Interface().(runtime.Object))
			}
		}
	}
	metav1.AddToGroupVersion(builtinScheme, schema.GroupVersion{Version: "v1"})
	builtinScheme.AddUnversionedTypes(schema.GroupVersion{Group: "", Version: "v1"},
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
	for _, k := range kinds {
		utilruntime.Must(registerFieldLabels(k))
	}
}

// reviewGroupVersions: the groups of the token and review APIs (tokens.go, reviews.go), served but
// never stored.
var reviewGroupVersions = []schema.GroupVersion{authenticationv1.SchemeGroupVersion, authorizationv1.SchemeGroupVersion}

// servedGroupVersions: the groups of the stored kinds, in the table's order.
func servedGroupVersions() []schema.GroupVersion {
	var gvs []schema.GroupVersion
	seen := map[schema.GroupVersion]bool{}
	for _, k := range kinds {
		if !seen[k.gv] {
			seen[k.gv] = true
			gvs = append(gvs, k.gv)
		}
	}
	return gvs
}

// registerFieldLabels accepts, in field selectors, metadata.name/namespace and the kind's own fields
// (the names come from the extractor applied to an empty object).
func registerFieldLabels(k *kind) error {
	allowed := map[string]bool{"metadata.name": true, "metadata.namespace": true}
	if k.fields != nil {
		for name := range k.fields(k.newObject()) {
			allowed[name] = true
		}
	}
	return builtinScheme.AddFieldLabelConversionFunc(k.gv.WithKind(k.kind), func(label, value string) (string, string, error) {
		if allowed[label] {
			return label, value, nil
		}
		return "", "", fmt.Errorf("field label not supported: %s", label)
	})
}

func (k *kind) newObject() runtime.Object {
	obj, err := builtinScheme.New(k.gv.WithKind(k.kind))
	utilruntime.Must(err)
	return obj
}

func (k *kind) newList() runtime.Object {
	obj, err := builtinScheme.New(k.gv.WithKind(k.kind + "List"))
	utilruntime.Must(err)
	return obj
}

func (k *kind) groupResource() schema.GroupResource {
	return schema.GroupResource{Group: k.gv.Group, Resource: k.resource}
}

// builtinCodec writes each built-in object to etcd in its group's version (protobuf-free JSON).
func builtinCodec() runtime.Codec {
	return builtinCodecs.LegacyCodec(servedGroupVersions()...)
}

func storageFactory(etcd *genericoptions.EtcdOptions, codec runtime.Codec) serverstorage.StorageFactory {
	config := etcd.StorageConfig
	config.Codec = codec
	return &genericoptions.SimpleStorageFactory{StorageConfig: config}
}

// shortNamesStore adds kubectl's short names to a store.
type shortNamesStore struct {
	*genericregistry.Store
	shortNames []string
}

func (s shortNamesStore) ShortNames() []string { return s.shortNames }

func newStore(k *kind, getter generic.RESTOptionsGetter) (*genericregistry.Store, error) {
	s := strategy{ObjectTyper: builtinScheme, NameGenerator: names.SimpleNameGenerator, k: k}
	store := &genericregistry.Store{
		NewFunc:                   k.newObject,
		NewListFunc:               k.newList,
		DefaultQualifiedResource:  k.groupResource(),
		SingularQualifiedResource: schema.GroupResource{Group: k.gv.Group, Resource: strings.ToLower(k.kind)},
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		ResetFieldsStrategy:       s,
		TableConvertor:            rest.NewDefaultTableConvertor(k.groupResource()),
		ReturnDeletedObject:       k.returnDeleted,
	}
	err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: getter, AttrFunc: s.attrs})
	return store, err
}

// apiExtras: what installBuiltins serves besides the table's kinds (the token and review APIs), and
// the RBAC policy the RBAC kinds' storage enforces on writes (rbacstore.go).
type apiExtras struct {
	storage map[schema.GroupVersion]map[string]rest.Storage
	policy  *rbacPolicy
}

// installBuiltins serves every kind of the table, with /status and pods/binding, and the extras.
func installBuiltins(server *genericapiserver.GenericAPIServer, getter generic.RESTOptionsGetter, extras apiExtras) error {
	byGroup := map[schema.GroupVersion]map[string]rest.Storage{}
	storageOf := func(gv schema.GroupVersion) map[string]rest.Storage {
		if byGroup[gv] == nil {
			byGroup[gv] = map[string]rest.Storage{}
		}
		return byGroup[gv]
	}
	for _, k := range kinds {
		store, err := newStore(k, getter)
		if err != nil {
			return fmt.Errorf("storage for %s: %w", k.resource, err)
		}
		storage := storageOf(k.gv)
		storage[k.resource] = shortNamesStore{store, k.shortNames}
		if k.gv.Group == rbacv1.GroupName && extras.policy != nil {
			storage[k.resource] = escalationCheckingStore{shortNamesStore{store, k.shortNames}, extras.policy, k.groupResource()}
		}
		if k.status {
			storage[k.resource+"/status"] = newStatusREST(store)
		}
		if k.kind == "Pod" && k.gv.Group == "" {
			storage["pods/binding"] = &bindingREST{pods: store}
		}
	}
	for gv, resources := range extras.storage {
		for name, storage := range resources {
			storageOf(gv)[name] = storage
		}
	}
	for _, gv := range append(servedGroupVersions(), reviewGroupVersions...) {
		if byGroup[gv] == nil {
			continue
		}
		info := genericapiserver.NewDefaultAPIGroupInfo(gv.Group, builtinScheme, metav1.ParameterCodec, builtinCodecs)
		info.PrioritizedVersions = []schema.GroupVersion{gv}
		info.VersionedResourcesStorageMap[gv.Version] = byGroup[gv]
		var err error
		if gv.Group == "" {
			err = server.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, &info)
		} else {
			err = server.InstallAPIGroup(&info)
		}
		if err != nil {
			return fmt.Errorf("installing %s: %w", gv, err)
		}
	}
	return nil
}

// --- field selectors, as kube-apiserver offers them for these kinds

func podFields(obj runtime.Object) fields.Set {
	pod := obj.(*corev1.Pod)
	return fields.Set{
		"spec.nodeName":            pod.Spec.NodeName,
		"spec.schedulerName":       pod.Spec.SchedulerName,
		"spec.serviceAccountName":  pod.Spec.ServiceAccountName,
		"spec.restartPolicy":       string(pod.Spec.RestartPolicy),
		"spec.hostNetwork":         strconv.FormatBool(pod.Spec.HostNetwork),
		"status.phase":             string(pod.Status.Phase),
		"status.podIP":             pod.Status.PodIP,
		"status.nominatedNodeName": pod.Status.NominatedNodeName,
	}
}

func nodeFields(obj runtime.Object) fields.Set {
	return fields.Set{"spec.unschedulable": strconv.FormatBool(obj.(*corev1.Node).Spec.Unschedulable)}
}

func resourceSliceFields(obj runtime.Object) fields.Set {
	slice := obj.(*resourcev1.ResourceSlice)
	nodeName := ""
	if slice.Spec.NodeName != nil {
		nodeName = *slice.Spec.NodeName
	}
	return fields.Set{"spec.nodeName": nodeName, "spec.driver": slice.Spec.Driver}
}

func secretFields(obj runtime.Object) fields.Set {
	return fields.Set{"type": string(obj.(*corev1.Secret).Type)}
}

func namespaceFields(obj runtime.Object) fields.Set {
	return fields.Set{"status.phase": string(obj.(*corev1.Namespace).Status.Phase)}
}

func eventFields(obj runtime.Object) fields.Set {
	event := obj.(*corev1.Event)
	return fields.Set{
		"involvedObject.kind":            event.InvolvedObject.Kind,
		"involvedObject.namespace":       event.InvolvedObject.Namespace,
		"involvedObject.name":            event.InvolvedObject.Name,
		"involvedObject.uid":             string(event.InvolvedObject.UID),
		"involvedObject.apiVersion":      event.InvolvedObject.APIVersion,
		"involvedObject.resourceVersion": event.InvolvedObject.ResourceVersion,
		"involvedObject.fieldPath":       event.InvolvedObject.FieldPath,
		"reason":                         event.Reason,
		"reportingComponent":             event.ReportingController,
		"source":                         event.Source.Component,
		"type":                           event.Type,
	}
}
