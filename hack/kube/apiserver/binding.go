package main

// pods/binding: what a scheduler (here: slurm_sync's bridge) posts to put a pod on a node.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
)

type bindingREST struct{ pods *genericregistry.Store }

func (r *bindingREST) New() runtime.Object   { return &corev1.Binding{} }
func (r *bindingREST) Destroy()              {}
func (r *bindingREST) NamespaceScoped() bool { return true }

// PreserveRequestObjectMetaSystemFieldsOnSubresourceCreate keeps the binding's metadata.uid: it names
// the pod the scheduler decided about, so a pod recreated under the same name is not bound by mistake.
func (r *bindingREST) PreserveRequestObjectMetaSystemFieldsOnSubresourceCreate() bool { return true }

// Create binds as kube-apiserver does: the pod must exist, be unbound and not be deleting; the
// binding's annotations are copied onto the pod and PodScheduled becomes True. A pod already bound
// is a 409 Conflict.
func (r *bindingREST) Create(ctx context.Context, name string, obj runtime.Object,
	createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	binding, ok := obj.(*corev1.Binding)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a Binding: %T", obj))
	}
	if binding.Name != name {
		return nil, apierrors.NewBadRequest("name in URL does not match name in Binding object")
	}
	if errs := validateBinding(binding); len(errs) > 0 {
		return nil, apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Binding").GroupKind(), name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, binding.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	key, err := r.pods.KeyFunc(ctx, name)
	if err != nil {
		return nil, err
	}
	dryRun := len(options.DryRun) > 0
	err = r.pods.Storage.GuaranteedUpdate(ctx, key, &corev1.Pod{}, false, nil,
		storage.SimpleUpdate(func(current runtime.Object) (runtime.Object, error) {
			return bindPod(current.(*corev1.Pod), binding)
		}), dryRun, nil)
	if err != nil {
		return nil, err
	}
	return &metav1.Status{Status: metav1.StatusSuccess, Code: 201}, nil
}

func validateBinding(binding *corev1.Binding) field.ErrorList {
	var errs field.ErrorList
	target := field.NewPath("target")
	if binding.Target.Kind != "" && binding.Target.Kind != "Node" {
		errs = append(errs, field.NotSupported(target.Child("kind"), binding.Target.Kind, []string{"Node", "<empty>"}))
	}
	if binding.Target.Name == "" {
		errs = append(errs, field.Required(target.Child("name"), ""))
	}
	return errs
}

func bindPod(pod *corev1.Pod, binding *corev1.Binding) (*corev1.Pod, error) {
	if pod.DeletionTimestamp != nil {
		return nil, apierrors.NewConflict(corev1.Resource("pods/binding"), pod.Name,
			fmt.Errorf("pod %s is being deleted, cannot be assigned to a host", pod.Name))
	}
	if binding.UID != "" && binding.UID != pod.UID {
		return nil, apierrors.NewConflict(corev1.Resource("pods/binding"), pod.Name,
			fmt.Errorf("pod UID %s does not match the binding's %s", pod.UID, binding.UID))
	}
	if pod.Spec.NodeName != "" {
		return nil, apierrors.NewConflict(corev1.Resource("pods/binding"), pod.Name,
			fmt.Errorf("pod %s is already assigned to node %q", pod.Name, pod.Spec.NodeName))
	}
	pod.Spec.NodeName = binding.Target.Name
	for key, value := range binding.Annotations {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[key] = value
	}
	setPodScheduled(pod)
	return pod, nil
}

func setPodScheduled(pod *corev1.Pod) {
	now := metav1.Now()
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			if pod.Status.Conditions[i].Status != corev1.ConditionTrue {
				pod.Status.Conditions[i].Status = corev1.ConditionTrue
				pod.Status.Conditions[i].LastTransitionTime = now
			}
			return
		}
	}
	pod.Status.Conditions = append(pod.Status.Conditions,
		corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now})
}
