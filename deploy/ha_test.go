package deploy

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

// haKustomization is the part of kustomize's Kustomization the HA overlay
// uses; decoding it strictly fails on any other field.
type haKustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Patches    []struct {
		Path string `json:"path"`
	} `json:"patches"`
	ConfigMapGenerator []struct {
		Name     string   `json:"name"`
		Literals []string `json:"literals"`
	} `json:"configMapGenerator"`
	SecretGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
	} `json:"secretGenerator"`
}

// haCoordinator applies one of the overlay's strategic-merge patches to a
// base StatefulSet (the coordinator's or the job service's); haAgent the
// agent's patch to the base DaemonSet.
func haCoordinator(t *testing.T, base *appsv1.StatefulSet, patchFile string) *appsv1.StatefulSet {
	t.Helper()
	return haPatch(t, base, patchFile)
}

func haAgent(t *testing.T, base *appsv1.DaemonSet, patchFile string) *appsv1.DaemonSet {
	t.Helper()
	return haPatch(t, base, patchFile)
}

// haPatch applies one of the overlay's strategic-merge patches to a base
// object the way kustomize does (merge keys from the API types' patch
// tags, null deletes a field, $patch: delete removes a list element) and
// decodes the result strictly.
func haPatch[T any](t *testing.T, base *T, patchFile string) *T {
	t.Helper()
	original, err := json.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := fs.ReadFile(files, path.Join("kubernetes-ha", patchFile))
	if err != nil {
		t.Fatal(err)
	}
	patch, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		t.Fatalf("%s: %v", patchFile, err)
	}
	var zero T
	patched, err := strategicpatch.StrategicMergePatch(original, patch, zero)
	if err != nil {
		t.Fatalf("%s does not apply to the base %T: %v", patchFile, zero, err)
	}
	out := new(T)
	if err := decodeStrict(patched, out); err != nil {
		t.Fatalf("the patched %T: %v", zero, err)
	}
	return out
}

// TestHAOverlay: deploy/kubernetes-ha is the base with three coordinators
// on etcd: every file is used, the patched StatefulSet decodes strictly and
// runs the replicas as docs/ha.md asks (registry in etcd, no volume, each
// replica advertising its own stable name, spread over nodes, a disruption
// budget that keeps a leader and a standby), unprivileged as before, with
// every credential flag naming a key of the Secret mounted there.
func TestHAOverlay(t *testing.T) {
	var k haKustomization
	raw, err := fs.ReadFile(files, "kubernetes-ha/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeStrict(raw, &k); err != nil {
		t.Fatalf("kubernetes-ha/kustomization.yaml: %v", err)
	}
	base := load(t)
	if k.Namespace != base.kust.Namespace || !slices.Contains(k.Resources, "../kubernetes") || len(k.Patches) != 3 {
		t.Fatalf("the overlay must build on ../kubernetes in namespace %s with three patches (coordinator, jobs, agent): %+v", base.kust.Namespace, k)
	}
	used := map[string]bool{"kustomization.yaml": true, k.Patches[0].Path: true, k.Patches[1].Path: true, k.Patches[2].Path: true}
	var pdb *policyv1.PodDisruptionBudget
	var peers *corev1.Service
	for _, res := range k.Resources {
		if res == "../kubernetes" {
			continue
		}
		used[res] = true
		raw, err := fs.ReadFile(files, path.Join("kubernetes-ha", res))
		if err != nil {
			t.Fatal(err)
		}
		var kind struct{ Kind string }
		if err := yaml.Unmarshal(raw, &kind); err != nil {
			t.Fatalf("%s: %v", res, err)
		}
		switch kind.Kind {
		case "PodDisruptionBudget":
			pdb = &policyv1.PodDisruptionBudget{}
			if err := decodeStrict(raw, pdb); err != nil {
				t.Fatalf("%s: %v", res, err)
			}
		case "Service":
			peers = &corev1.Service{}
			if err := decodeStrict(raw, peers); err != nil {
				t.Fatalf("%s: %v", res, err)
			}
		default:
			t.Fatalf("%s: a %s, want the disruption budget or the job service's peers Service", res, kind.Kind)
		}
	}
	entries, _ := fs.ReadDir(files, "kubernetes-ha")
	for _, e := range entries {
		if !used[e.Name()] {
			t.Errorf("kubernetes-ha/%s is not used by its kustomization", e.Name())
		}
	}

	ss := haCoordinator(t, base.statefulSets[0], k.Patches[0].Path)
	spec := ss.Spec.Template.Spec
	c := container(t, spec)
	labels := ss.Spec.Template.Labels
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 3 {
		t.Error("three coordinator replicas")
	}
	if len(ss.Spec.VolumeClaimTemplates) != 0 || flagValue(c.Args, "--work-dir") != "" {
		t.Error("with etcd a coordinator keeps nothing on disk: no registry volume, no --work-dir")
	}
	for _, m := range c.VolumeMounts {
		if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
			t.Errorf("volume mount %s (%s) has no volume", m.Name, m.MountPath)
		}
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		t.Error("the patch must keep the base's security contexts")
	}

	// Flags: etcd from the generated ConfigMap, every replica's own name.
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if v := flagValue(c.Args, "--etcd-endpoints"); v != "$(ETCD_ENDPOINTS)" {
		t.Errorf("--etcd-endpoints=%q, want $(ETCD_ENDPOINTS)", v)
	}
	ref := env["ETCD_ENDPOINTS"].ValueFrom
	if ref == nil || ref.ConfigMapKeyRef == nil || len(k.ConfigMapGenerator) != 1 ||
		ref.ConfigMapKeyRef.Name != k.ConfigMapGenerator[0].Name ||
		!slices.ContainsFunc(k.ConfigMapGenerator[0].Literals, func(l string) bool { return strings.HasPrefix(l, ref.ConfigMapKeyRef.Key+"=") }) {
		t.Errorf("ETCD_ENDPOINTS must come from the generated ConfigMap's key: %+v", env["ETCD_ENDPOINTS"])
	}
	if want := "https://$(POD_NAME)." + ss.Spec.ServiceName + "." + k.Namespace + ".svc:5050"; flagValue(c.Args, "--advertise-url") != want {
		t.Errorf("--advertise-url=%q, want %q (the replica's stable name under the governing Service)", flagValue(c.Args, "--advertise-url"), want)
	}
	if f := env["POD_NAME"].ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != "metadata.name" {
		t.Error("POD_NAME must be the pod's name (fieldRef metadata.name)")
	}
	for _, flag := range []string{"--tls-cert", "--tls-key", "--client-ca", "--authz"} {
		if flagValue(c.Args, flag) == "" {
			t.Errorf("the HA args lost the base's %s", flag)
		}
	}
	// Credentials: each etcd flag names a key of the Secret mounted at its
	// directory.
	secretAt := map[string]string{}
	for _, v := range spec.Volumes {
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name && v.Secret != nil {
				secretAt[m.MountPath] = v.Secret.SecretName
			}
		}
	}
	keys := map[string][]string{}
	for _, g := range k.SecretGenerator {
		for _, f := range g.Files {
			key, _, _ := strings.Cut(f, "=")
			keys[g.Name] = append(keys[g.Name], key)
		}
	}
	for _, flag := range []string{"--etcd-ca", "--etcd-cert", "--etcd-key"} {
		file := flagValue(c.Args, flag)
		if secret, ok := secretAt[path.Dir(file)]; !ok || !slices.Contains(keys[secret], path.Base(file)) {
			t.Errorf("%s=%s is not a key of a generated Secret mounted at %s", flag, file, path.Dir(file))
		}
	}

	// Spread and disruption budget select the coordinator's pods.
	matches := func(sel map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	spread := spec.TopologySpreadConstraints
	if len(spread) != 1 || spread[0].TopologyKey != "kubernetes.io/hostname" || spread[0].LabelSelector == nil || !matches(spread[0].LabelSelector.MatchLabels) {
		t.Errorf("replicas must spread over nodes: %+v", spread)
	}
	if pdb == nil || pdb.Spec.Selector == nil || !matches(pdb.Spec.Selector.MatchLabels) ||
		pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 2 {
		t.Errorf("want a disruption budget keeping 2 of the 3 coordinators: %+v", pdb)
	}

	// The job service: three replicas on etcd that reach every
	// coordinator by the names they advertise.
	jobs := haCoordinator(t, base.statefulSets[1], k.Patches[1].Path)
	checkHAJobs(t, jobs, ss, peers, k.Namespace)

	// The agents: every coordinator replica, the rest of the base's pod.
	agents := haAgent(t, base.daemonSets[0], k.Patches[2].Path)
	checkHAAgent(t, agents, ss, k.Namespace)
	baseArgs := container(t, base.daemonSets[0].Spec.Template.Spec).Args
	gotArgs := container(t, agents.Spec.Template.Spec).Args
	if len(gotArgs) != len(baseArgs) {
		t.Errorf("agent args %v; want the base's %v with --coordinator changed", gotArgs, baseArgs)
	}
	for _, a := range baseArgs {
		if flag, _, _ := strings.Cut(a, "="); flag != "--coordinator" && !slices.Contains(gotArgs, a) {
			t.Errorf("the agent patch lost the base's %s", a)
		}
	}
}

// checkHAAgent checks that the agents of an HA deployment are given every
// coordinator replica's advertised URL: a single Service URL reaches
// followers, which refuse an agent, and an agent follows the leader only
// among the URLs it was given.
func checkHAAgent(t *testing.T, agents *appsv1.DaemonSet, coordinator *appsv1.StatefulSet, namespace string) {
	t.Helper()
	var want []string
	for i := range *coordinator.Spec.Replicas {
		want = append(want, fmt.Sprintf("https://%s-%d.%s.%s.svc:5050", coordinator.Name, i, coordinator.Spec.ServiceName, namespace))
	}
	c := container(t, agents.Spec.Template.Spec)
	if got := flagValue(c.Args, "--coordinator"); got != strings.Join(want, ",") {
		t.Errorf("agent --coordinator=%q, want every coordinator replica %q", got, strings.Join(want, ","))
	}
}

// checkHAJobs checks the job service StatefulSet of an HA deployment: three
// replicas with their jobs in etcd (no volume, no --work-dir), each
// advertising its name under the peers Service (headless, published while
// not ready), given every coordinator replica's advertised URL, ready only
// while leading (the health check) and alive while its port answers.
func checkHAJobs(t *testing.T, jobs, coordinator *appsv1.StatefulSet, peers *corev1.Service, namespace string) {
	t.Helper()
	c := container(t, jobs.Spec.Template.Spec)
	if jobs.Spec.Replicas == nil || *jobs.Spec.Replicas != 3 || len(jobs.Spec.VolumeClaimTemplates) != 0 || flagValue(c.Args, "--work-dir") != "" {
		t.Error("three job service replicas, their jobs in etcd: no volume claim, no --work-dir")
	}
	if peers == nil || peers.Name != jobs.Spec.ServiceName || peers.Spec.ClusterIP != "None" || !peers.Spec.PublishNotReadyAddresses ||
		peers.Spec.Selector["app.kubernetes.io/name"] != jobs.Spec.Template.Labels["app.kubernetes.io/name"] {
		t.Errorf("the job service's governing Service must be headless, publish not-ready replicas and select them: %+v", peers)
	}
	if want := "https://$(POD_NAME)." + jobs.Spec.ServiceName + "." + namespace + ".svc:5060"; flagValue(c.Args, "--advertise-url") != want {
		t.Errorf("jobs --advertise-url=%q, want %q", flagValue(c.Args, "--advertise-url"), want)
	}
	var want []string
	for i := range *coordinator.Spec.Replicas {
		want = append(want, fmt.Sprintf("https://%s-%d.%s.%s.svc:5050", coordinator.Name, i, coordinator.Spec.ServiceName, namespace))
	}
	if got := flagValue(c.Args, "--coordinator"); got != strings.Join(want, ",") {
		t.Errorf("jobs --coordinator=%q, want every coordinator replica %q: a single Service URL reaches followers, which refuse a framework", got, strings.Join(want, ","))
	}
	for _, flag := range []string{"--etcd-endpoints", "--etcd-ca", "--etcd-cert", "--etcd-key", "--tls-cert", "--tls-key", "--client-ca", "--authz", "--token-file", "--ca"} {
		if flagValue(c.Args, flag) == "" {
			t.Errorf("jobs: %s missing", flag)
		}
	}
	if p := flagValue(c.Args, "--etcd-prefix"); p == "" || p == "/slackline/" {
		t.Errorf("jobs --etcd-prefix=%q: the job service needs its own prefix", p)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.Exec == nil || c.LivenessProbe == nil || c.LivenessProbe.TCPSocket == nil || c.LivenessProbe.Exec != nil {
		t.Errorf("jobs probes: readiness must be the health check (leader only), liveness the port: %+v %+v", c.ReadinessProbe, c.LivenessProbe)
	}
	for _, m := range c.VolumeMounts {
		if !slices.ContainsFunc(jobs.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
			t.Errorf("jobs volume mount %s (%s) has no volume", m.Name, m.MountPath)
		}
	}
}
