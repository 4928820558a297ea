// Command kube-lab-apiserver is the Kubernetes API server of the test harness (hack/kube/up.sh).
//
// It chains two servers from Debian's packaged Kubernetes libraries, the way kube-apiserver does:
// the apiextensions server (CustomResourceDefinitions and custom resources, with the real
// structural-schema, CEL, status, finalizer and watch machinery) in front, delegating everything
// else to a generic API server of ours that serves the built-in kinds the project touches
// (builtin.go). Both keep their objects in one etcd. Built-in defaulting and validation live in the
// Kubernetes main repository, which is not packaged: built-in objects are stored as given, apart
// from the few server-side behaviours listed in strategy.go.
//
// Serving is TLS on loopback (a self-signed CA written to --cert-dir). Authentication: the
// administrator's bearer token (--token-file, in system:masters), ServiceAccount tokens the server
// signs (auth.go, minted by serviceaccounts/token: tokens.go), else anonymous. Authorization:
// system:masters, then RBAC over the stored roles and bindings (rbac.go, with kube's escalation
// checks on writing them: rbacstore.go, and the bootstrap roles: bootstrap.go); access reviews in
// reviews.go. Audit events to a log, as kube-apiserver writes them (--audit-log-path). Admission:
// NamespaceLifecycle, and with --admission-webhooks the mutating and validating webhooks, Services
// resolved to ready pods (webhooks.go). On start it writes a kubeconfig (--kubeconfig-out) for the
// administrator's token.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	extensionsoptions "k8s.io/apiextensions-apiserver/pkg/cmd/server/options"
	extensionsopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	netutils "k8s.io/utils/net"

	builtinopenapi "slinkykube/openapi"
)

type settings struct {
	etcdServers   string
	bindPort      int
	certDir       string
	tokenFile     string
	kubeconfigOut string
	gcInterval    float64
	anonymousAuth bool
	alternateIPs  string
	auditLog      string
	auditPolicy   string
	webhooks      bool
}

func parseFlags() settings {
	var s settings
	flag.StringVar(&s.etcdServers, "etcd-servers", "http://127.0.0.1:2379", "comma-separated etcd URLs")
	flag.IntVar(&s.bindPort, "secure-port", 6443, "HTTPS port on 127.0.0.1")
	flag.StringVar(&s.certDir, "cert-dir", "certs", "where the self-signed serving certificate is written")
	flag.StringVar(&s.tokenFile, "token-file", "token", "file holding the administrator's bearer token")
	flag.StringVar(&s.kubeconfigOut, "kubeconfig-out", "kubeconfig", "kubeconfig to write for that token")
	flag.Float64Var(&s.gcInterval, "gc-interval", 1, "seconds between garbage collector sweeps")
	flag.BoolVar(&s.anonymousAuth, "anonymous-auth", true,
		"requests without credentials are system:anonymous (as kube-apiserver's default), else 401")
	flag.StringVar(&s.alternateIPs, "alternate-ips", "",
		"comma-separated extra IP addresses for the serving certificate (where pods reach the server, as the kubernetes Service's ClusterIP)")
	flag.StringVar(&s.auditLog, "audit-log-path", "", "write audit events here as JSON lines (k8s.io/apiserver's log backend)")
	flag.StringVar(&s.auditPolicy, "audit-policy-file", "", "the audit policy (audit.k8s.io/v1 Policy) deciding what is logged")
	flag.BoolVar(&s.webhooks, "admission-webhooks", false,
		"call Mutating- and ValidatingWebhookConfigurations' webhooks (Services resolved to ready pods: needs a pod network, as the cluster lab's)")
	flag.BoolVar(&gracefulPodDeletion, "graceful-pod-deletion", false,
		"delete bound pods gracefully, for a kubelet stand-in to finish (the cluster lab)")
	klog.InitFlags(nil)
	flag.Parse()
	return s
}

func main() {
	s := parseFlags()
	if err := run(s); err != nil {
		fmt.Fprintf(os.Stderr, "kube-lab-apiserver: %v\n", err)
		os.Exit(1)
	}
}

func run(s settings) error {
	token, err := os.ReadFile(s.tokenFile)
	if err != nil {
		return fmt.Errorf("reading --token-file: %w", err)
	}
	adminToken := strings.TrimSpace(string(token))
	if adminToken == "" {
		return fmt.Errorf("--token-file %s is empty", s.tokenFile)
	}
	etcd := genericoptions.NewEtcdOptions(storagebackend.NewDefaultConfig("/registry", nil))
	etcd.StorageConfig.Transport.ServerList = strings.Split(s.etcdServers, ",")

	base, auth, err := baseConfig(s, adminToken)
	if err != nil {
		return err
	}
	// The built-in kinds' server: our scheme and codec in etcd.
	coreConfig := *base
	if err := etcd.ApplyWithStorageFactoryTo(storageFactory(etcd, builtinCodec()), &coreConfig.Config); err != nil {
		return err
	}
	core, err := coreConfig.Complete().New("kube-lab-builtin", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return fmt.Errorf("building the built-in API server: %w", err)
	}
	if err := installBuiltins(core, coreConfig.RESTOptionsGetter, auth.extras()); err != nil {
		return err
	}

	// The apiextensions server in front, as kube-apiserver configures it: its own codec, no
	// post-start hooks of its own config (the delegate's are inherited).
	extConfig := coreConfig
	extConfig.PostStartHooks = map[string]genericapiserver.PostStartHookConfigEntry{}
	extConfig.RESTOptionsGetter = etcd.CreateRESTOptionsGetter(
		storageFactory(etcd, apiextensionsapiserver.Codecs.LegacyCodec(v1beta1.SchemeGroupVersion, apiextensionsv1.SchemeGroupVersion)),
		extConfig.ResourceTransformers)
	extConfig.MergedResourceConfig = apiextensionsapiserver.DefaultAPIResourceConfigSource()
	extensions, err := (&apiextensionsapiserver.Config{
		GenericConfig: &extConfig,
		ExtraConfig: apiextensionsapiserver.ExtraConfig{
			CRDRESTOptionsGetter: extensionsoptions.NewCRDRESTOptionsGetter(*etcd, extConfig.ResourceTransformers,
				extConfig.StorageObjectCountTracker),
			ServiceResolver:     noServiceResolver{},
			AuthResolverWrapper: webhook.NewDefaultAuthenticationInfoResolverWrapper(nil, nil, extConfig.LoopbackClientConfig, nil),
		},
	}).Complete().New(core)
	if err != nil {
		return fmt.Errorf("building the apiextensions server: %w", err)
	}
	server := extensions.GenericAPIServer
	shareLegacyDiscovery(core, server)
	addLabHooks(server, s, base.SharedInformerFactory)
	if err := writeKubeconfig(s, adminToken); err != nil {
		return err
	}
	ctx := genericapiserver.SetupSignalContext()
	return server.PrepareRun().RunWithContext(ctx)
}

// baseConfig is what both servers share: serving, authentication, authorization, admission,
// OpenAPI and the aggregated discovery document (one, so /apis lists both servers' groups).
func baseConfig(s settings, adminToken string) (*genericapiserver.RecommendedConfig, *labAuth, error) {
	serving := genericoptions.NewSecureServingOptions().WithLoopback()
	serving.BindAddress = netutils.ParseIPSloppy("127.0.0.1")
	serving.BindPort = s.bindPort
	serving.ServerCert.CertDirectory = s.certDir
	serving.ServerCert.PairName = "apiserver"
	ips := []net.IP{netutils.ParseIPSloppy("127.0.0.1")}
	for _, text := range strings.Split(s.alternateIPs, ",") {
		if text = strings.TrimSpace(text); text != "" {
			ip := netutils.ParseIPSloppy(text)
			if ip == nil {
				return nil, nil, fmt.Errorf("--alternate-ips: %q is not an IP address", text)
			}
			ips = append(ips, ip)
		}
	}
	// the names a pod's in-cluster client may use for the kubernetes Service, as kube-apiserver's own certificate has
	names := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if err := serving.MaybeDefaultWithSelfSignedCerts("localhost", names, ips); err != nil {
		return nil, nil, fmt.Errorf("creating self-signed certificates: %w", err)
	}
	config := genericapiserver.NewRecommendedConfig(builtinCodecs)
	config.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	config.EnableProfiling = false
	config.BuildHandlerChainFunc = func(handler http.Handler, c *genericapiserver.Config) http.Handler {
		return trimTrailingSlash(genericapiserver.DefaultBuildHandlerChain(handler, c))
	}
	if err := serving.ApplyTo(&config.SecureServing, &config.LoopbackClientConfig); err != nil {
		return nil, nil, err
	}

	namer := openapinamer.NewDefinitionNamer(builtinScheme, apiextensionsapiserver.Scheme)
	config.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openAPIDefinitions, namer)
	config.OpenAPIConfig.Info.Title = "kube-lab"
	config.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openAPIDefinitions, namer)
	config.OpenAPIV3Config.Info.Title = "kube-lab"
	config.AggregatedDiscoveryGroupManager = aggregated.NewResourceManager("apis")

	client, err := kubernetes.NewForConfig(config.LoopbackClientConfig)
	if err != nil {
		return nil, nil, err
	}
	dynamicClient, err := dynamic.NewForConfig(config.LoopbackClientConfig)
	if err != nil {
		return nil, nil, err
	}
	config.ClientConfig = config.LoopbackClientConfig
	config.SharedInformerFactory = informers.NewSharedInformerFactory(client, 0)

	auth, err := newLabAuth(s, adminToken, config.SharedInformerFactory, client)
	if err != nil {
		return nil, nil, err
	}
	config.Authentication.Authenticator = auth.authenticator
	config.Authentication.APIAudiences = apiAudiences
	config.Authorization.Authorizer = auth.authorizer
	// the loopback client's own token, in system:masters
	genericapiserver.AuthorizeClientBearerToken(config.LoopbackClientConfig, &config.Authentication, &config.Authorization)
	// Audit, as kube-apiserver's --audit-log-path and --audit-policy-file (the cluster lab's least-privilege figure)
	audit := genericoptions.NewAuditOptions()
	audit.LogOptions.Path = s.auditLog
	audit.PolicyFile = s.auditPolicy
	if err := audit.ApplyTo(&config.Config); err != nil {
		return nil, nil, fmt.Errorf("audit: %w", err)
	}
	// Admission: NamespaceLifecycle (no writes into missing or terminating namespaces), then with
	// --admission-webhooks the mutating and validating webhooks, in kube-apiserver's order (webhooks.go).
	// Without a pod network (hack/kube's own lab) a webhook naming a Service could never be reached, and a
	// chart installed there without its pods would refuse every pod it selects: they stay off there.
	admission := genericoptions.NewAdmissionOptions()
	admission.EnablePlugins = []string{lifecycle.PluginName}
	admission.DisablePlugins = []string{"MutatingAdmissionPolicy", "ValidatingAdmissionPolicy"}
	webhooks := []string{"MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"}
	if s.webhooks {
		admission.EnablePlugins = append(admission.EnablePlugins, webhooks...)
	} else {
		admission.DisablePlugins = append(admission.DisablePlugins, webhooks...)
	}
	if err := admission.ApplyTo(&config.Config, config.SharedInformerFactory, client, dynamicClient,
		utilfeature.DefaultFeatureGate, config.EffectiveVersion, webhookInitializer(config.SharedInformerFactory)); err != nil {
		return nil, nil, fmt.Errorf("admission: %w", err)
	}
	return config, auth, nil
}

// labAuth: who a request is (auth.go) and what it may do (rbac.go), and the APIs over them.
type labAuth struct {
	issuer        *tokenIssuer
	authenticator authenticator.Request
	authorizer    authorizer.Authorizer
	rbac          *rbacAuthorizer
	client        kubernetes.Interface
}

func newLabAuth(s settings, adminToken string, factory informers.SharedInformerFactory, client kubernetes.Interface) (*labAuth, error) {
	issuer, err := newTokenIssuer(s.certDir)
	if err != nil {
		return nil, err
	}
	authz, rbac := newAuthorizer(factory)
	return &labAuth{
		issuer:        issuer,
		authenticator: newAuthenticator(adminToken, issuer, newBoundObjects(factory, client), s.anonymousAuth),
		authorizer:    authz,
		rbac:          rbac,
		client:        client,
	}, nil
}

// extras: the token and review APIs, and the RBAC policy the RBAC kinds' storage enforces.
func (a *labAuth) extras() apiExtras {
	return apiExtras{
		storage: map[schema.GroupVersion]map[string]rest.Storage{
			corev1.SchemeGroupVersion:           {"serviceaccounts/token": &tokenRequestREST{issuer: a.issuer, client: a.client}},
			authenticationv1.SchemeGroupVersion: authenticationStorage(a.authenticator),
			authorizationv1.SchemeGroupVersion:  reviewStorage(a.authorizer, a.rbac),
		},
		policy: &rbacPolicy{authorizer: a.authorizer, rbac: a.rbac},
	}
}

// openAPIDefinitions: the built-in kinds' (generated at build time by openapi-gen over k8s.io/api)
// and the apiextensions server's own.
func openAPIDefinitions(ref openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition {
	defs := builtinopenapi.GetOpenAPIDefinitions(ref)
	for name, def := range extensionsopenapi.GetOpenAPIDefinitions(ref) {
		defs[name] = def
	}
	return defs
}

// trimTrailingSlash: Debian's go-restful (3.10) does not match "/version/" to "/version"; clients
// (the Python client asks for /version/, /api/, /apis/) rely on kube-apiserver answering both.
func trimTrailingSlash(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.Path) > 1 && strings.HasSuffix(r.URL.Path, "/") {
			r.URL.Path = strings.TrimSuffix(r.URL.Path, "/")
			r.URL.RawPath = ""
		}
		next.ServeHTTP(w, r)
	})
}

// noServiceResolver: conversion webhooks would need a cluster network; none of our CRDs uses one.
type noServiceResolver struct{}

func (noServiceResolver) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	return nil, fmt.Errorf("kube-lab has no cluster network: cannot reach service %s/%s:%d", namespace, name, port)
}

func writeKubeconfig(s settings, token string) error {
	ca, err := os.ReadFile(s.certDir + "/apiserver.crt")
	if err != nil {
		return err
	}
	config := clientcmdapi.NewConfig()
	config.Clusters["kube-lab"] = &clientcmdapi.Cluster{
		Server:                   fmt.Sprintf("https://127.0.0.1:%d", s.bindPort),
		CertificateAuthorityData: ca,
	}
	config.AuthInfos["kube-lab-admin"] = &clientcmdapi.AuthInfo{Token: token}
	config.Contexts["kube-lab"] = &clientcmdapi.Context{Cluster: "kube-lab", AuthInfo: "kube-lab-admin", Namespace: "default"}
	config.CurrentContext = "kube-lab"
	return clientcmd.WriteToFile(*config, s.kubeconfigOut)
}

// shareLegacyDiscovery: the apiextensions server keeps its group out of the un-aggregated /apis
// list, which the delegate serves; add it there (custom resource groups are added by crdGroups).
func shareLegacyDiscovery(core, front *genericapiserver.GenericAPIServer) {
	group := apiextensionsv1.SchemeGroupVersion
	core.DiscoveryGroupManager.AddGroup(groupFor(schema.GroupVersion{Group: group.Group, Version: group.Version}))
	front.AddPostStartHookOrDie("kube-lab-crd-discovery", func(hook genericapiserver.PostStartHookContext) error {
		go runCRDGroups(hook.Context, front.LoopbackClientConfig, core.DiscoveryGroupManager)
		return nil
	})
}

func addLabHooks(server *genericapiserver.GenericAPIServer, s settings, factory informers.SharedInformerFactory) {
	server.AddPostStartHookOrDie("kube-lab-namespaces", func(hook genericapiserver.PostStartHookContext) error {
		return createSystemNamespaces(hook.Context, hook.LoopbackClientConfig)
	})
	server.AddPostStartHookOrDie("rbac/bootstrap-roles", func(hook genericapiserver.PostStartHookContext) error {
		return createBootstrapPolicy(hook.Context, hook.LoopbackClientConfig)
	})
	server.AddPostStartHookOrDie("kube-lab-clusterrole-aggregation", func(hook genericapiserver.PostStartHookContext) error {
		go runClusterRoleAggregation(hook.Context, factory, hook.LoopbackClientConfig)
		return nil
	})
	server.AddPostStartHookOrDie("kube-lab-garbage-collector", func(hook genericapiserver.PostStartHookContext) error {
		go runGarbageCollector(hook.Context, hook.LoopbackClientConfig, s.gcInterval)
		return nil
	})
}
