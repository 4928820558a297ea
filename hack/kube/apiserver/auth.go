package main

// Authentication, as kube-apiserver authenticates with --token-auth-file, --service-account-* and
// --anonymous-auth (the defaults):
//   - the administrator's bearer token (--token-file): user kube-lab-admin in system:masters;
//   - ServiceAccount tokens: JWTs this server signs (ES256, a key kept in --cert-dir) with the claims
//     of kube-apiserver's bound tokens (iss, sub=system:serviceaccount:<ns>:<name>, aud, exp, iat, nbf,
//     jti and "kubernetes.io": namespace, serviceaccount {name, uid}, optionally the pod, secret or
//     node the token is bound to). Minted by the TokenRequest subresource (tokens.go). A token is
//     accepted while it is unexpired, one of its audiences is the server's (the issuer URL, as
//     kube-apiserver defaults --api-audiences), and the ServiceAccount it names still exists with
//     the same uid (and the bound object likewise): the user is system:serviceaccount:<ns>:<name> in
//     system:serviceaccounts, system:serviceaccounts:<ns> and system:authenticated;
//   - no credentials: system:anonymous in system:unauthenticated (RBAC then grants it only
//     system:public-info-viewer). A bad or refused token is 401, never anonymous.
// Kubernetes' own JWT validator (pkg/serviceaccount) is in the unpackaged main repository; this is a
// small one over the same go-jose library.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/anonymous"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	requestunion "k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	tokenjwt "k8s.io/apiserver/pkg/authentication/token/jwt"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"

	jose "gopkg.in/square/go-jose.v2"
	"gopkg.in/square/go-jose.v2/jwt"
)

// serviceAccountIssuer is the issuer of the tokens (kubeadm's --service-account-issuer) and the one
// API audience (kube-apiserver's default --api-audiences).
const serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

var apiAudiences = authenticator.Audiences{serviceAccountIssuer}

const adminUser = "kube-lab-admin"

// newAuthenticator: the request authenticator (bearer tokens, then anonymous), which TokenReview asks
// too. The loopback client's own token is added in front of it by the generic server's
// AuthorizeClientBearerToken (main.go).
func newAuthenticator(adminToken string, issuer *tokenIssuer, lookup *boundObjects, anonymousAuth bool) authenticator.Request {
	admin := &user.DefaultInfo{Name: adminUser, Groups: []string{user.SystemPrivilegedGroup}}
	tokens := tokenunion.New(
		authenticator.WrapAudienceAgnosticToken(apiAudiences, tokenfile.New(map[string]*user.DefaultInfo{adminToken: admin})),
		&serviceAccountAuthenticator{issuer: issuer, lookup: lookup},
	)
	auth := group.NewAuthenticatedGroupAdder(bearertoken.New(tokens))
	if anonymousAuth {
		// a bearer token that fails is an error, not anonymous (kube-apiserver's FailOnError union)
		auth = requestunion.NewFailOnError(auth, anonymous.NewAuthenticator(nil))
	}
	return auth
}

// --- the signing key and the tokens

type tokenIssuer struct {
	key    *ecdsa.PrivateKey
	keyID  string
	signer jose.Signer
}

// newTokenIssuer loads the ES256 key from dir/service-account.key, creating it on first use.
func newTokenIssuer(dir string) (*tokenIssuer, error) {
	path := filepath.Join(dir, "service-account.key")
	key, err := readECKey(path)
	if errors.Is(err, os.ErrNotExist) {
		key, err = writeECKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("the service account signing key %s: %w", path, err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(der)
	keyID := base64.RawURLEncoding.EncodeToString(sum[:]) // kube's key id: the public key's SHA-256
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256,
		Key: jose.JSONWebKey{Algorithm: string(jose.ES256), Key: key, KeyID: keyID, Use: "sig"}}, nil)
	if err != nil {
		return nil, err
	}
	return &tokenIssuer{key: key, keyID: keyID, signer: signer}, nil
}

func readECKey(path string) (*ecdsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "EC PRIVATE KEY" {
		return nil, fmt.Errorf("not a PEM EC PRIVATE KEY")
	}
	return x509.ParseECPrivateKey(block.Bytes)
}

func writeECKey(path string) (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	return key, os.Rename(tmp, path)
}

// privateClaims: the "kubernetes.io" claim of a bound ServiceAccount token.
type privateClaims struct {
	Kubernetes kubernetesClaims `json:"kubernetes.io,omitempty"`
}

type kubernetesClaims struct {
	Namespace      string           `json:"namespace,omitempty"`
	ServiceAccount claimRef         `json:"serviceaccount,omitempty"`
	Pod            *claimRef        `json:"pod,omitempty"`
	Secret         *claimRef        `json:"secret,omitempty"`
	Node           *claimRef        `json:"node,omitempty"`
	WarnAfter      *jwt.NumericDate `json:"warnafter,omitempty"`
}

type claimRef struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid,omitempty"`
}

// bound: what a token is bound to besides its ServiceAccount (TokenRequest's boundObjectRef, and the
// node of a bound pod).
type bound struct {
	pod, secret, node *claimRef
	warnAfter         *jwt.NumericDate
}

// mint signs a token for the ServiceAccount, valid from now for the duration.
func (t *tokenIssuer) mint(sa *corev1.ServiceAccount, to bound, audiences []string, now time.Time, validity time.Duration) (string, error) {
	public := &jwt.Claims{
		Issuer:    serviceAccountIssuer,
		Subject:   serviceaccount.MakeUsername(sa.Namespace, sa.Name),
		Audience:  jwt.Audience(audiences),
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		Expiry:    jwt.NewNumericDate(now.Add(validity)),
		ID:        string(uuid.NewUUID()),
	}
	private := &privateClaims{Kubernetes: kubernetesClaims{
		Namespace:      sa.Namespace,
		ServiceAccount: claimRef{Name: sa.Name, UID: string(sa.UID)},
		Pod:            to.pod,
		Secret:         to.secret,
		Node:           to.node,
		WarnAfter:      to.warnAfter,
	}}
	return jwt.Signed(t.signer).Claims(public).Claims(private).CompactSerialize()
}

// --- validating them

type serviceAccountAuthenticator struct {
	issuer *tokenIssuer
	lookup *boundObjects
}

func (a *serviceAccountAuthenticator) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	if !hasIssuer(token, serviceAccountIssuer) {
		return nil, false, nil // not ours: another authenticator's
	}
	parsed, err := jwt.ParseSigned(token)
	if err != nil {
		return nil, false, nil
	}
	public := &jwt.Claims{}
	private := &privateClaims{}
	if err := parsed.Claims(&a.issuer.key.PublicKey, public, private); err != nil {
		return nil, false, err
	}
	tokenAudiences := authenticator.Audiences(public.Audience)
	if len(tokenAudiences) == 0 {
		tokenAudiences = apiAudiences
	}
	requested, ok := authenticator.AudiencesFrom(ctx)
	if !ok {
		requested = apiAudiences
	}
	audiences := tokenAudiences.Intersect(requested)
	if len(audiences) == 0 {
		return nil, false, fmt.Errorf("token audiences %q is invalid for the target audiences %q", tokenAudiences, requested)
	}
	info, err := a.validate(ctx, public, private)
	if err != nil {
		return nil, false, err
	}
	return &authenticator.Response{User: info.UserInfo(), Audiences: audiences}, true, nil
}

// validate: kube's serviceaccount validator: the times, then the ServiceAccount (and any bound
// object) still there with the uid of the claim and not deleted more than the leeway ago.
func (a *serviceAccountAuthenticator) validate(ctx context.Context, public *jwt.Claims, private *privateClaims) (*serviceaccount.ServiceAccountInfo, error) {
	now := time.Now()
	switch err := public.Validate(jwt.Expected{Time: now}); err {
	case nil:
	case jwt.ErrExpired:
		return nil, errors.New("service account token has expired")
	case jwt.ErrNotValidYet:
		return nil, errors.New("service account token is not valid yet")
	case jwt.ErrIssuedInTheFuture:
		return nil, errors.New("service account token is issued in the future")
	default:
		return nil, err
	}
	deletedBefore := now.Add(-jwt.DefaultLeeway)
	claims := private.Kubernetes
	namespace, saRef := claims.Namespace, claims.ServiceAccount
	if namespace == "" || saRef.Name == "" || public.Subject != serviceaccount.MakeUsername(namespace, saRef.Name) {
		return nil, errors.New("service account token claims are malformed")
	}
	sa, err := a.lookup.serviceAccount(ctx, namespace, saRef.Name, saRef.UID)
	if err != nil {
		return nil, err
	}
	if sa.DeletionTimestamp != nil && sa.DeletionTimestamp.Time.Before(deletedBefore) {
		return nil, fmt.Errorf("service account %s/%s has been deleted", namespace, saRef.Name)
	}
	if string(sa.UID) != saRef.UID {
		return nil, fmt.Errorf("service account UID (%s) does not match claim (%s)", sa.UID, saRef.UID)
	}
	info := &serviceaccount.ServiceAccountInfo{Name: sa.Name, Namespace: sa.Namespace, UID: string(sa.UID),
		CredentialID: tokenjwt.CredentialIDForJTI(public.ID)}
	for _, ref := range []struct {
		kind string
		ref  *claimRef
	}{{"pod", claims.Pod}, {"secret", claims.Secret}, {"node", claims.Node}} {
		if ref.ref == nil {
			continue
		}
		if ref.kind == "node" && claims.Pod != nil { // a pod's node is information, not a binding
			info.NodeName, info.NodeUID = ref.ref.Name, ref.ref.UID
			continue
		}
		meta, err := a.lookup.object(ctx, ref.kind, namespace, ref.ref.Name)
		if err != nil || (meta.DeletionTimestamp != nil && meta.DeletionTimestamp.Time.Before(deletedBefore)) {
			return nil, errors.New("service account token has been invalidated")
		}
		if string(meta.UID) != ref.ref.UID {
			return nil, fmt.Errorf("%s UID (%s) does not match claim (%s)", ref.kind, meta.UID, ref.ref.UID)
		}
		switch ref.kind {
		case "pod":
			info.PodName, info.PodUID = ref.ref.Name, ref.ref.UID
		case "node":
			info.NodeName, info.NodeUID = ref.ref.Name, ref.ref.UID
		}
	}
	return info, nil
}

// hasIssuer: the token is a JWT whose (unverified) iss is the issuer.
func hasIssuer(token, issuer string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var claims struct {
		Issuer string `json:"iss"`
	}
	return json.Unmarshal(payload, &claims) == nil && claims.Issuer == issuer
}

// boundObjects reads ServiceAccounts from the informer's cache, asking the storage when the cache does
// not have the uid asked for (it may lag behind a create); pods, Secrets and Nodes from the storage.
type boundObjects struct {
	serviceAccounts corelisters.ServiceAccountLister
	client          kubernetes.Interface
}

func newBoundObjects(factory informers.SharedInformerFactory, client kubernetes.Interface) *boundObjects {
	return &boundObjects{serviceAccounts: factory.Core().V1().ServiceAccounts().Lister(), client: client}
}

func (b *boundObjects) serviceAccount(ctx context.Context, namespace, name, uid string) (*corev1.ServiceAccount, error) {
	if sa, err := b.serviceAccounts.ServiceAccounts(namespace).Get(name); err == nil && (uid == "" || string(sa.UID) == uid) {
		return sa, nil
	}
	return b.client.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (b *boundObjects) object(ctx context.Context, kind, namespace, name string) (*metav1.ObjectMeta, error) {
	switch kind {
	case "pod":
		pod, err := b.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return &pod.ObjectMeta, nil
	case "secret":
		secret, err := b.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return &secret.ObjectMeta, nil
	case "node":
		node, err := b.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return &node.ObjectMeta, nil
	}
	return nil, apierrors.NewBadRequest("cannot bind a token to a " + kind)
}
