package main

// authorization.k8s.io/v1: SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectAccessReview and
// SelfSubjectRulesReview, answered by the server's own authorizer (system:masters, then RBAC), as
// kube-apiserver's pkg/registry/authorization does. `kubectl auth can-i` posts a
// SelfSubjectAccessReview (with --as, impersonating: the generic handler chain's impersonation filter,
// which asks the same authorizer whether the caller may impersonate); `kubectl auth can-i --list` a
// SelfSubjectRulesReview. Nothing is stored.

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
)

// createOnly is the common part of the review resources: created, never stored.
type createOnly struct {
	singular   string
	namespaced bool
	newObject  func() runtime.Object
}

func (c createOnly) New() runtime.Object     { return c.newObject() }
func (c createOnly) Destroy()                {}
func (c createOnly) NamespaceScoped() bool   { return c.namespaced }
func (c createOnly) GetSingularName() string { return c.singular }

type accessReviewREST struct {
	createOnly
	authorizer authorizer.Authorizer
	rules      authorizer.RuleResolver
}

// reviewStorage: the authorization.k8s.io/v1 resources.
func reviewStorage(a authorizer.Authorizer, rules authorizer.RuleResolver) map[string]rest.Storage {
	review := func(singular string, namespaced bool, newObject func() runtime.Object) *accessReviewREST {
		return &accessReviewREST{createOnly{singular, namespaced, newObject}, a, rules}
	}
	return map[string]rest.Storage{
		"subjectaccessreviews": subjectAccessReviewREST{review("subjectaccessreview", false,
			func() runtime.Object { return &authorizationv1.SubjectAccessReview{} })},
		"localsubjectaccessreviews": localSubjectAccessReviewREST{review("localsubjectaccessreview", true,
			func() runtime.Object { return &authorizationv1.LocalSubjectAccessReview{} })},
		"selfsubjectaccessreviews": selfSubjectAccessReviewREST{review("selfsubjectaccessreview", false,
			func() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} })},
		"selfsubjectrulesreviews": selfSubjectRulesReviewREST{review("selfsubjectrulesreview", false,
			func() runtime.Object { return &authorizationv1.SelfSubjectRulesReview{} })},
	}
}

type subjectAccessReviewREST struct{ *accessReviewREST }
type localSubjectAccessReviewREST struct{ *accessReviewREST }
type selfSubjectAccessReviewREST struct{ *accessReviewREST }
type selfSubjectRulesReviewREST struct{ *accessReviewREST }

func invalid(kind string, errs field.ErrorList) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: authorizationv1.GroupName, Kind: kind}, "", errs)
}

func (r subjectAccessReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc,
	_ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.SubjectAccessReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SubjectAccessReview: %T", obj))
	}
	errs := validateSubjectAccessReviewSpec(review.Spec, field.NewPath("spec"))
	if !metaIsEmpty(review.ObjectMeta, false) {
		errs = append(errs, field.Invalid(field.NewPath("metadata"), review.ObjectMeta, "must be empty"))
	}
	if len(errs) > 0 {
		return nil, invalid("SubjectAccessReview", errs)
	}
	if err := validateCreate(ctx, createValidation, obj); err != nil {
		return nil, err
	}
	review.Status = r.decide(ctx, attributesFromSpec(review.Spec))
	return review, nil
}

func (r localSubjectAccessReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc,
	_ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.LocalSubjectAccessReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a LocalSubjectAccessReview: %T", obj))
	}
	errs := validateSubjectAccessReviewSpec(review.Spec, field.NewPath("spec"))
	if !metaIsEmpty(review.ObjectMeta, true) {
		errs = append(errs, field.Invalid(field.NewPath("metadata"), review.ObjectMeta, "must be empty except for namespace"))
	}
	if attrs := review.Spec.ResourceAttributes; attrs != nil && attrs.Namespace != review.Namespace {
		errs = append(errs, field.Invalid(field.NewPath("spec.resourceAttributes.namespace"), attrs.Namespace, "must match metadata.namespace"))
	}
	if review.Spec.NonResourceAttributes != nil {
		errs = append(errs, field.Invalid(field.NewPath("spec.nonResourceAttributes"), review.Spec.NonResourceAttributes,
			"disallowed on this kind of request"))
	}
	if len(errs) > 0 {
		return nil, invalid("LocalSubjectAccessReview", errs)
	}
	namespace := genericapirequest.NamespaceValue(ctx)
	if namespace == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("namespace is required on this type: %v", namespace))
	}
	if namespace != review.Namespace {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("spec.resourceAttributes.namespace must match namespace: %v", namespace))
	}
	if err := validateCreate(ctx, createValidation, obj); err != nil {
		return nil, err
	}
	review.Status = r.decide(ctx, attributesFromSpec(review.Spec))
	return review, nil
}

func (r selfSubjectAccessReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc,
	_ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.SelfSubjectAccessReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SelfSubjectAccessReview: %T", obj))
	}
	spec := review.Spec
	var errs field.ErrorList
	if spec.ResourceAttributes != nil && spec.NonResourceAttributes != nil {
		errs = append(errs, field.Invalid(field.NewPath("spec", "nonResourceAttributes"), spec.NonResourceAttributes,
			"cannot be specified in combination with resourceAttributes"))
	}
	if spec.ResourceAttributes == nil && spec.NonResourceAttributes == nil {
		errs = append(errs, field.Invalid(field.NewPath("spec", "resourceAttributes"), spec.NonResourceAttributes,
			"exactly one of nonResourceAttributes or resourceAttributes must be specified"))
	}
	if len(errs) > 0 {
		return nil, invalid("SelfSubjectAccessReview", errs)
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewBadRequest("no user present on request")
	}
	if err := validateCreate(ctx, createValidation, obj); err != nil {
		return nil, err
	}
	if spec.ResourceAttributes != nil {
		review.Status = r.decide(ctx, resourceAttributes(u, *spec.ResourceAttributes))
	} else {
		review.Status = r.decide(ctx, nonResourceAttributes(u, *spec.NonResourceAttributes))
	}
	return review, nil
}

func (r selfSubjectRulesReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc,
	_ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.SelfSubjectRulesReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SelfSubjectRulesReview: %T", obj))
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewBadRequest("no user present on request")
	}
	if review.Spec.Namespace == "" {
		return nil, apierrors.NewBadRequest("no namespace on request")
	}
	if err := validateCreate(ctx, createValidation, obj); err != nil {
		return nil, err
	}
	resourceRules, nonResourceRules, incomplete, err := r.rules.RulesFor(ctx, u, review.Spec.Namespace)
	status := authorizationv1.SubjectRulesReviewStatus{
		ResourceRules: []authorizationv1.ResourceRule{}, NonResourceRules: []authorizationv1.NonResourceRule{}, Incomplete: incomplete}
	for _, rule := range resourceRules {
		status.ResourceRules = append(status.ResourceRules, authorizationv1.ResourceRule{Verbs: rule.GetVerbs(),
			APIGroups: rule.GetAPIGroups(), Resources: rule.GetResources(), ResourceNames: rule.GetResourceNames()})
	}
	for _, rule := range nonResourceRules {
		status.NonResourceRules = append(status.NonResourceRules,
			authorizationv1.NonResourceRule{Verbs: rule.GetVerbs(), NonResourceURLs: rule.GetNonResourceURLs()})
	}
	if err != nil {
		status.EvaluationError = err.Error()
	}
	review.Status = status
	return review, nil
}

func (r *accessReviewREST) decide(ctx context.Context, attrs authorizer.AttributesRecord) authorizationv1.SubjectAccessReviewStatus {
	decision, reason, err := r.authorizer.Authorize(ctx, attrs)
	status := authorizationv1.SubjectAccessReviewStatus{
		Allowed: decision == authorizer.DecisionAllow,
		Denied:  decision == authorizer.DecisionDeny,
		Reason:  reason,
	}
	if err != nil {
		status.EvaluationError = err.Error()
	}
	return status
}

func validateCreate(ctx context.Context, createValidation rest.ValidateObjectFunc, obj runtime.Object) error {
	if createValidation == nil {
		return nil
	}
	return createValidation(ctx, obj.DeepCopyObject())
}

func validateSubjectAccessReviewSpec(spec authorizationv1.SubjectAccessReviewSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if spec.ResourceAttributes != nil && spec.NonResourceAttributes != nil {
		errs = append(errs, field.Invalid(path.Child("nonResourceAttributes"), spec.NonResourceAttributes,
			"cannot be specified in combination with resourceAttributes"))
	}
	if spec.ResourceAttributes == nil && spec.NonResourceAttributes == nil {
		errs = append(errs, field.Invalid(path.Child("resourceAttributes"), spec.NonResourceAttributes,
			"exactly one of nonResourceAttributes or resourceAttributes must be specified"))
	}
	if spec.User == "" && len(spec.Groups) == 0 {
		errs = append(errs, field.Invalid(path.Child("user"), spec.User, "at least one of user or group must be specified"))
	}
	return errs
}

// metaIsEmpty: no metadata but what the create handler itself adds (managed fields; the namespace of
// a namespaced review).
func metaIsEmpty(meta metav1.ObjectMeta, namespaced bool) bool {
	meta.ManagedFields = nil
	if namespaced {
		meta.Namespace = ""
	}
	return apiequality.Semantic.DeepEqual(metav1.ObjectMeta{}, meta)
}

// attributesFromSpec: the user and request a SubjectAccessReview asks about (kube's
// authorizationutil.AuthorizationAttributesFrom).
func attributesFromSpec(spec authorizationv1.SubjectAccessReviewSpec) authorizer.AttributesRecord {
	extra := map[string][]string{}
	for key, value := range spec.Extra {
		extra[key] = value
	}
	u := &user.DefaultInfo{Name: spec.User, Groups: spec.Groups, UID: spec.UID, Extra: extra}
	if spec.ResourceAttributes != nil {
		return resourceAttributes(u, *spec.ResourceAttributes)
	}
	return nonResourceAttributes(u, *spec.NonResourceAttributes)
}

func resourceAttributes(u user.Info, in authorizationv1.ResourceAttributes) authorizer.AttributesRecord {
	version := in.Version
	if version == "" {
		version = "*"
	}
	return authorizer.AttributesRecord{User: u, Verb: in.Verb, Namespace: in.Namespace, APIGroup: in.Group, APIVersion: version,
		Resource: in.Resource, Subresource: in.Subresource, Name: in.Name, ResourceRequest: true}
}

func nonResourceAttributes(u user.Info, in authorizationv1.NonResourceAttributes) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{User: u, Verb: in.Verb, Path: in.Path, ResourceRequest: false}
}
