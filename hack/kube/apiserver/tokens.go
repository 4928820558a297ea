package main

// The token APIs of kube-apiserver (pkg/registry/core/serviceaccount/storage/token.go and
// pkg/registry/authentication, in the unpackaged main repository):
//   - POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token (authentication.k8s.io/v1 TokenRequest):
//     a token for the ServiceAccount, as a kubelet asks for a pod's projected token and as `kubectl
//     create token` does. Audiences default to the server's, expirationSeconds to 3600 (at least 600);
//     boundObjectRef may name a Pod (which must run as that ServiceAccount), a Secret or a Node, whose
//     uid the token then carries: deleting that object revokes the token. A kubelet's pod-bound token
//     (3607 s, the server's audience) lasts a year and carries warnafter, as with kube-apiserver's
//     default --service-account-extend-token-expiration.
//   - tokenreviews: what the server's authenticator says of a token (for audiences given or its own);
//   - selfsubjectreviews: who the caller is (`kubectl auth whoami`).

import (
	"context"
	"fmt"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/kubernetes"

	"gopkg.in/square/go-jose.v2/jwt"
)

const (
	defaultTokenSeconds   = 3600
	warnOnlyTokenSeconds  = 3607 // what a kubelet asks for a projected token
	extendedTokenValidity = 365 * 24 * time.Hour
)

func isAPIAudiences(audiences []string) bool {
	for _, a := range audiences {
		if !apiAudiences.Has(a) {
			return false
		}
	}
	return len(audiences) > 0
}

// tokenRequestREST serves serviceaccounts/token.
type tokenRequestREST struct {
	issuer *tokenIssuer
	client kubernetes.Interface // the loopback client
}

func (r *tokenRequestREST) New() runtime.Object   { return &authenticationv1.TokenRequest{} }
func (r *tokenRequestREST) Destroy()              {}
func (r *tokenRequestREST) NamespaceScoped() bool { return true }

func (r *tokenRequestREST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return authenticationv1.SchemeGroupVersion.WithKind("TokenRequest")
}

func (r *tokenRequestREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc,
	_ *metav1.CreateOptions) (runtime.Object, error) {
	req, ok := obj.(*authenticationv1.TokenRequest)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a TokenRequest: %T", obj))
	}
	gk := schema.GroupKind{Group: authenticationv1.GroupName, Kind: "TokenRequest"}
	namespace, ok := genericapirequest.NamespaceFrom(ctx)
	if !ok || namespace == "" {
		return nil, apierrors.NewBadRequest("namespace is required")
	}
	if req.Name != "" && req.Name != name {
		return nil, apierrors.NewInvalid(gk, name, field.ErrorList{
			field.Invalid(field.NewPath("metadata").Child("name"), req.Name, "must match the service account name if specified")})
	}
	if req.Namespace != "" && req.Namespace != namespace {
		return nil, apierrors.NewInvalid(gk, name, field.ErrorList{
			field.Invalid(field.NewPath("metadata").Child("namespace"), req.Namespace, "must match the service account namespace if specified")})
	}
	client := r.client
	sa, err := client.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if len(req.Spec.Audiences) == 0 {
		req.Spec.Audiences = apiAudiences
	}
	if req.Spec.ExpirationSeconds == nil {
		seconds := int64(defaultTokenSeconds)
		req.Spec.ExpirationSeconds = &seconds
	}
	req.Name, req.Namespace = sa.Name, sa.Namespace
	now := time.Now()
	req.CreationTimestamp = metav1.NewTime(now)
	req.Status = authenticationv1.TokenRequestStatus{}
	seconds := *req.Spec.ExpirationSeconds
	specPath := field.NewPath("spec")
	if seconds < 10*60 {
		return nil, apierrors.NewInvalid(gk, name, field.ErrorList{
			field.Invalid(specPath.Child("expirationSeconds"), seconds, "may not specify a duration less than 10 minutes")})
	}
	if seconds > 1<<32 {
		return nil, apierrors.NewInvalid(gk, name, field.ErrorList{
			field.Invalid(specPath.Child("expirationSeconds"), seconds, "may not specify a duration larger than 2^32 seconds")})
	}
	if err := validateCreate(ctx, createValidation, obj); err != nil {
		return nil, err
	}
	to, err := r.boundTo(ctx, client, name, namespace, req.Spec.BoundObjectRef)
	if err != nil {
		return nil, err
	}
	// kube-apiserver's --service-account-extend-token-expiration (default true): a kubelet's pod-bound
	// token for the API server's audiences, asked for 3607 s, lasts a year and only warns after 3607 s.
	validity := time.Duration(seconds) * time.Second
	if to.pod != nil && seconds == warnOnlyTokenSeconds && isAPIAudiences(req.Spec.Audiences) {
		to.warnAfter = jwt.NewNumericDate(now.Add(validity))
		validity = extendedTokenValidity
	}
	token, err := r.issuer.mint(sa, to, req.Spec.Audiences, now, validity)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out := req.DeepCopy()
	out.Status = authenticationv1.TokenRequestStatus{
		Token:               token,
		ExpirationTimestamp: metav1.NewTime(now.Add(time.Duration(seconds) * time.Second)),
	}
	return out, nil
}

// boundTo: the object of boundObjectRef (a Pod's node too), checked as kube-apiserver does.
func (r *tokenRequestREST) boundTo(ctx context.Context, client kubernetes.Interface, saName, namespace string,
	ref *authenticationv1.BoundObjectReference) (bound, error) {
	var to bound
	if ref == nil {
		return to, nil
	}
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	var meta *metav1.ObjectMeta
	switch {
	case gvk.Group == "" && gvk.Kind == "Pod":
		pod, err := client.CoreV1().Pods(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return to, err
		}
		account := pod.Spec.ServiceAccountName
		if account == "" {
			account = "default" // the lab does not default pods; kube-apiserver's defaulting would
		}
		if account != saName {
			return to, apierrors.NewBadRequest(fmt.Sprintf(
				"cannot bind token for serviceaccount %q to pod running with different serviceaccount name.", saName))
		}
		meta = &pod.ObjectMeta
		to.pod = &claimRef{Name: pod.Name, UID: string(pod.UID)}
		if pod.Spec.NodeName != "" {
			if node, err := client.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{}); err == nil {
				to.node = &claimRef{Name: node.Name, UID: string(node.UID)}
			}
		}
	case gvk.Group == "" && gvk.Kind == "Secret":
		secret, err := client.CoreV1().Secrets(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return to, err
		}
		meta = &secret.ObjectMeta
		to.secret = &claimRef{Name: secret.Name, UID: string(secret.UID)}
	case gvk.Group == "" && gvk.Kind == "Node":
		node, err := client.CoreV1().Nodes().Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return to, err
		}
		meta = &node.ObjectMeta
		to.node = &claimRef{Name: node.Name, UID: string(node.UID)}
	default:
		return to, apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s", gvk.String()))
	}
	if ref.UID != "" && ref.UID != meta.UID {
		return to, apierrors.NewConflict(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, ref.Name,
			fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated",
				ref.UID))
	}
	return to, nil
}

// --- authentication.k8s.io/v1

type tokenReviewREST struct {
	createOnly
	authenticator authenticator.Request
}

type selfSubjectReviewREST struct{ createOnly }

func authenticationStorage(auth authenticator.Request) map[string]rest.Storage {
	return map[string]rest.Storage{
		"tokenreviews": &tokenReviewREST{createOnly{"tokenreview", false,
			func() runtime.Object { return &authenticationv1.TokenReview{} }}, auth},
		"selfsubjectreviews": &selfSubjectReviewREST{createOnly{"selfsubjectreview", false,
			func() runtime.Object { return &authenticationv1.SelfSubjectReview{} }}},
	}
}

func (r *tokenReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc,
	_ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authenticationv1.TokenReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a TokenReview: %T", obj))
	}
	if review.Spec.Token == "" {
		return nil, apierrors.NewBadRequest("token is required for TokenReview in authentication")
	}
	if err := validateCreate(ctx, createValidation, obj); err != nil {
		return nil, err
	}
	audiences := authenticator.Audiences(review.Spec.Audiences)
	if len(audiences) == 0 {
		audiences = apiAudiences
	}
	fake := (&http.Request{Header: http.Header{}}).WithContext(authenticator.WithAudiences(ctx, audiences))
	fake.Header.Set("Authorization", "Bearer "+review.Spec.Token)
	resp, ok, err := r.authenticator.AuthenticateRequest(fake)
	review.Status = authenticationv1.TokenReviewStatus{Authenticated: ok}
	if err != nil {
		review.Status.Error = err.Error()
	}
	if ok && resp != nil && len(audiences.Intersect(resp.Audiences)) == 0 {
		review.Status = authenticationv1.TokenReviewStatus{Error: "token audiences don't match request audiences"}
		return review, nil
	}
	if ok && resp != nil && resp.User != nil {
		review.Status.User = userInfo(resp.User)
		review.Status.Audiences = resp.Audiences
	}
	return review, nil
}

func (r *selfSubjectReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc,
	_ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authenticationv1.SelfSubjectReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SelfSubjectReview: %T", obj))
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewBadRequest("no user present on request")
	}
	if err := validateCreate(ctx, createValidation, obj); err != nil {
		return nil, err
	}
	review.Status = authenticationv1.SelfSubjectReviewStatus{UserInfo: userInfo(u)}
	return review, nil
}

func userInfo(u user.Info) authenticationv1.UserInfo {
	info := authenticationv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
	for key, value := range u.GetExtra() {
		if info.Extra == nil {
			info.Extra = map[string]authenticationv1.ExtraValue{}
		}
		info.Extra[key] = value
	}
	return info
}
