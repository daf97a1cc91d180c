// psa-check evaluates the pod templates of Kubernetes manifests against a Pod
// Security Standard level with the API server's own evaluator
// (k8s.io/pod-security-admission/policy), offline. Built by `make ops-tools`
// into .venv/bin; tests/ops/test_k8s.py runs it.
//
//	psa-check -level restricted < manifests.yaml
//
// Prints one JSON line per object that carries a pod spec (Pod, Deployment,
// StatefulSet, DaemonSet, ReplicaSet, Job, CronJob):
// {"kind", "name", "allowed", "forbidden": [{"reason", "detail"}]}.
// Exit status 1 if any is forbidden, 2 on bad input.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

type podTemplate struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     *corev1.PodSpec   `json:"spec"`
}

type object struct {
	Kind     string            `json:"kind"`
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		*corev1.PodSpec
		Template    *podTemplate `json:"template"`
		JobTemplate *struct {
			Spec struct {
				Template *podTemplate `json:"template"`
			} `json:"spec"`
		} `json:"jobTemplate"`
	} `json:"spec"`
}

type forbidden struct {
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

type verdict struct {
	Kind      string      `json:"kind"`
	Name      string      `json:"name"`
	Allowed   bool        `json:"allowed"`
	Forbidden []forbidden `json:"forbidden"`
}

// pod returns the pod metadata and spec an object runs, or nil if it runs none.
func (o *object) pod() (*metav1.ObjectMeta, *corev1.PodSpec) {
	switch o.Kind {
	case "Pod":
		var spec corev1.PodSpec
		if o.Spec.PodSpec != nil {
			spec = *o.Spec.PodSpec
		}
		return &o.Metadata, &spec
	case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController":
		if o.Spec.Template != nil && o.Spec.Template.Spec != nil {
			return &o.Spec.Template.Metadata, o.Spec.Template.Spec
		}
	case "CronJob":
		if t := o.Spec.JobTemplate; t != nil && t.Spec.Template != nil && t.Spec.Template.Spec != nil {
			return &t.Spec.Template.Metadata, t.Spec.Template.Spec
		}
	}
	return nil, nil
}

func main() {
	levelName := flag.String("level", "restricted", "Pod Security Standard level: baseline or restricted")
	flag.Parse()
	level, err := api.ParseLevel(*levelName)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	lv := api.LevelVersion{Level: level, Version: api.LatestVersion()}
	reader := yaml.NewYAMLReader(bufio.NewReader(os.Stdin))
	out := json.NewEncoder(os.Stdout)
	status := 0
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var obj object
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		meta, spec := obj.pod()
		if spec == nil {
			continue
		}
		v := verdict{Kind: obj.Kind, Name: obj.Metadata.Name, Allowed: true, Forbidden: []forbidden{}}
		if v.Name == "" {
			v.Name = obj.Metadata.GenerateName
		}
		for _, result := range evaluator.EvaluatePod(lv, meta, spec) {
			if !result.Allowed {
				v.Allowed = false
				v.Forbidden = append(v.Forbidden, forbidden{result.ForbiddenReason, result.ForbiddenDetail})
			}
		}
		if !v.Allowed {
			status = 1
		}
		if err := out.Encode(v); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(status)
}
