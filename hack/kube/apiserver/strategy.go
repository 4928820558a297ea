package main

// How the built-in kinds are created and updated. Without the packaged kube defaulting and
// validation, the server keeps only the behaviours clients can rely on everywhere:
//   - object metadata is validated (names, labels, annotations, owner references, finalizers);
//   - a status subresource: the main resource keeps the stored status, /status keeps everything
//     else; status is reset on create (Nodes excepted), pods start Pending, namespaces Active;
//   - metadata.generation starts at 1 and grows when the spec changes;
//   - Secret stringData is merged into data;
//   - a namespace carries its name as the label kubernetes.io/metadata.name (webhooks' and network
//     policies' namespaceSelectors match on it);
//   - webhook configurations get kube's defaults (defaultWebhooks): without them the admission plugins
//     read an absent objectSelector as "nothing" and never call a webhook.

import (
	"context"
	"reflect"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	k *kind
}

func (s strategy) NamespaceScoped() bool          { return s.k.namespaced }
func (s strategy) AllowCreateOnUpdate() bool      { return false }
func (s strategy) AllowUnconditionalUpdate() bool { return true }
func (s strategy) Canonicalize(runtime.Object)    {}

func (s strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (s strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

func (s strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	if s.k.status && !s.k.keepStatus {
		setField(obj, "Status", reflect.Zero(structField(obj, "Status").Type()))
	}
	if structField(obj, "Spec").IsValid() {
		objectMeta(obj).Generation = 1
	}
	if s.k.created != nil {
		s.k.created(obj)
	}
	mergeStringData(obj)
	labelNamespaceName(obj)
	defaultWebhooks(obj)
}

func (s strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	if s.k.status {
		setField(obj, "Status", structField(old, "Status"))
	}
	mergeStringData(obj)
	labelNamespaceName(obj)
	defaultWebhooks(obj)
	bumpGenerationOnSpecChange(obj, old)
}

// defaultWebhooks: admissionregistration/v1's SetDefaults_ValidatingWebhook, _MutatingWebhook, _Rule and
// _ServiceReference (pkg/apis/admissionregistration/v1/defaults.go in the Kubernetes repository).
func defaultWebhooks(obj runtime.Object) {
	switch config := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for i := range config.Webhooks {
			h := &config.Webhooks[i]
			defaultWebhook(&h.FailurePolicy, &h.MatchPolicy, &h.NamespaceSelector, &h.ObjectSelector, &h.TimeoutSeconds,
				h.Rules, &h.ClientConfig)
			if h.ReinvocationPolicy == nil {
				never := admissionregistrationv1.NeverReinvocationPolicy
				h.ReinvocationPolicy = &never
			}
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for i := range config.Webhooks {
			h := &config.Webhooks[i]
			defaultWebhook(&h.FailurePolicy, &h.MatchPolicy, &h.NamespaceSelector, &h.ObjectSelector, &h.TimeoutSeconds,
				h.Rules, &h.ClientConfig)
		}
	}
}

func defaultWebhook(failure **admissionregistrationv1.FailurePolicyType, match **admissionregistrationv1.MatchPolicyType,
	namespaces, objects **metav1.LabelSelector, timeout **int32, rules []admissionregistrationv1.RuleWithOperations,
	client *admissionregistrationv1.WebhookClientConfig) {
	if *failure == nil {
		fail := admissionregistrationv1.Fail
		*failure = &fail
	}
	if *match == nil {
		equivalent := admissionregistrationv1.Equivalent
		*match = &equivalent
	}
	if *namespaces == nil {
		*namespaces = &metav1.LabelSelector{}
	}
	if *objects == nil {
		*objects = &metav1.LabelSelector{}
	}
	if *timeout == nil {
		seconds := int32(10)
		*timeout = &seconds
	}
	for i := range rules {
		if rules[i].Scope == nil {
			all := admissionregistrationv1.AllScopes
			rules[i].Scope = &all
		}
	}
	if client.Service != nil && client.Service.Port == nil {
		port := int32(443)
		client.Service.Port = &port
	}
}

// labelNamespaceName: kube-apiserver's namespace strategy sets this label on create and update.
func labelNamespaceName(obj runtime.Object) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[corev1.LabelMetadataName] = ns.Name
}

func (s strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return apimachineryvalidation.ValidateObjectMeta(objectMeta(obj), s.k.namespaced, s.nameRule(), field.NewPath("metadata"))
}

func (s strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(objectMeta(obj), objectMeta(old), field.NewPath("metadata"))
	return append(errs, validateImmutable(obj, old)...)
}

// gracefulPodDeletion is --graceful-pod-deletion: the cluster lab has a kubelet stand-in to finish
// what a graceful deletion starts; the plain API server lab does not, so its pods go at once.
var gracefulPodDeletion bool

// CheckGracefulDelete deletes a pod as kube-apiserver does when a kubelet will finish the job: a pod
// bound to a node and not finished is only marked (deletionTimestamp, deletionGracePeriodSeconds:
// the request's, else the pod's terminationGracePeriodSeconds, else 30); the kubelet then deletes it
// with a grace period of 0 once its containers stopped. Other objects and unbound or finished pods
// go at once.
func (s strategy) CheckGracefulDelete(_ context.Context, obj runtime.Object, options *metav1.DeleteOptions) bool {
	pod, ok := obj.(*corev1.Pod)
	if !ok || !gracefulPodDeletion || options == nil {
		return false
	}
	period := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if options.GracePeriodSeconds != nil {
		period = *options.GracePeriodSeconds
	} else if pod.Spec.TerminationGracePeriodSeconds != nil {
		period = *pod.Spec.TerminationGracePeriodSeconds
	}
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		period = 0
	}
	options.GracePeriodSeconds = &period
	return true
}

// validateImmutable: an immutable Secret or ConfigMap keeps its data and stays immutable.
func validateImmutable(obj, old runtime.Object) field.ErrorList {
	immutable, oldImmutable := structField(obj, "Immutable"), structField(old, "Immutable")
	if !oldImmutable.IsValid() || oldImmutable.IsNil() || !oldImmutable.Elem().Bool() {
		return nil
	}
	var errs field.ErrorList
	if immutable.IsNil() || !immutable.Elem().Bool() {
		errs = append(errs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
	}
	for _, name := range []string{"Data", "StringData", "BinaryData"} {
		value, oldValue := structField(obj, name), structField(old, name)
		if value.IsValid() && !apiequality.Semantic.DeepEqual(value.Interface(), oldValue.Interface()) {
			errs = append(errs, field.Forbidden(field.NewPath(strings.ToLower(name[:1])+name[1:]),
				"field is immutable when `immutable` is set"))
		}
	}
	return errs
}

// nameRule: Services and Namespaces become DNS labels, so their names are labels; RBAC's roles and
// bindings need only be path segments (system:discovery); everything else we serve is a DNS subdomain.
func (s strategy) nameRule() apimachineryvalidation.ValidateNameFunc {
	switch {
	case s.k.resource == "services":
		return apimachineryvalidation.NameIsDNS1035Label
	case s.k.resource == "namespaces":
		return apimachineryvalidation.NameIsDNSLabel
	case s.k.gv.Group == rbacv1.GroupName:
		return path.ValidatePathSegmentName
	}
	return apimachineryvalidation.NameIsDNSSubdomain
}

// GetResetFields: server-side apply must not record a main-resource write as owning status.
func (s strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	if !s.k.status {
		return nil
	}
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(s.k.gv.String()): fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

func (s strategy) attrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	om := objectMeta(obj)
	set := generic.ObjectMetaFieldsSet(om, s.k.namespaced)
	if s.k.fields != nil {
		for name, value := range s.k.fields(obj) {
			set[name] = value
		}
	}
	return labels.Set(om.Labels), set, nil
}

// statusStrategy: a /status write changes status and object metadata, nothing else (owner
// references and deletion stay as stored, as kube-apiserver keeps them for pods).
type statusStrategy struct{ strategy }

func (s statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	value := reflect.ValueOf(obj).Elem()
	for i := 0; i < value.NumField(); i++ {
		switch value.Type().Field(i).Name {
		case "TypeMeta", "ObjectMeta", "Status":
		default:
			value.Field(i).Set(reflect.ValueOf(old).Elem().Field(i))
		}
	}
	om, oldMeta := objectMeta(obj), objectMeta(old)
	om.OwnerReferences = oldMeta.OwnerReferences
	om.DeletionTimestamp = oldMeta.DeletionTimestamp
	om.Generation = oldMeta.Generation
}

func (s statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(s.k.gv.String()): fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

// statusREST serves <resource>/status: get and update (patches arrive as updates).
type statusREST struct{ store *genericregistry.Store }

func newStatusREST(main *genericregistry.Store) *statusREST {
	store := *main
	status := statusStrategy{main.UpdateStrategy.(strategy)}
	store.UpdateStrategy = status
	store.ResetFieldsStrategy = status
	return &statusREST{store: &store}
}

func (r *statusREST) New() runtime.Object { return r.store.New() }
func (r *statusREST) Destroy()            {}

func (r *statusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

func (r *statusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo,
	createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc,
	_ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// a status write never creates the object
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

func (r *statusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

func (r *statusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

// --- helpers over the typed objects (all of them structs with ObjectMeta, most with Spec/Status)

func structField(obj runtime.Object, name string) reflect.Value {
	return reflect.ValueOf(obj).Elem().FieldByName(name)
}

func setField(obj runtime.Object, name string, value reflect.Value) {
	if f := structField(obj, name); f.IsValid() {
		f.Set(value)
	}
}

func objectMeta(obj runtime.Object) *metav1.ObjectMeta {
	return structField(obj, "ObjectMeta").Addr().Interface().(*metav1.ObjectMeta)
}

func bumpGenerationOnSpecChange(obj, old runtime.Object) {
	spec, oldSpec := structField(obj, "Spec"), structField(old, "Spec")
	if !spec.IsValid() {
		return
	}
	generation := objectMeta(old).Generation
	if !apiequality.Semantic.DeepEqual(spec.Interface(), oldSpec.Interface()) {
		generation++
	}
	objectMeta(obj).Generation = generation
}

// mergeStringData: kube-apiserver turns a Secret's write-only stringData into data.
func mergeStringData(obj runtime.Object) {
	secret, ok := obj.(*corev1.Secret)
	if !ok || len(secret.StringData) == 0 {
		return
	}
	if secret.Data == nil {
		secret.Data = map[string][]byte{}
	}
	for key, value := range secret.StringData {
		secret.Data[key] = []byte(value)
	}
	secret.StringData = nil
}
