package deploy

import (
	"bytes"
	"errors"
	"io/fs"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/slackline/slackline/bpf"
)

// kustomization is the part of kustomize's Kustomization the manifests use;
// decoding it strictly fails on any other field.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
	Labels []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeTemplates bool              `json:"includeTemplates"`
	} `json:"labels"`
	SecretGenerator []struct {
		Name    string   `json:"name"`
		Files   []string `json:"files"`
		Options struct {
			DisableNameSuffixHash bool `json:"disableNameSuffixHash"`
		} `json:"options"`
	} `json:"secretGenerator"`
}

// decodeStrict decodes a YAML document the way the API server's strict
// field validation does: duplicate keys, unknown fields and fields in the
// wrong case ("hostPid") all fail. (sigs.k8s.io/yaml's UnmarshalStrict uses
// encoding/json, which matches field names case-insensitively.)
func decodeStrict(doc []byte, into any) error {
	raw, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(raw, into)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// objects are the decoded manifests of the kustomization.
type objects struct {
	kust         kustomization
	daemonSets   []*appsv1.DaemonSet
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	accounts     []*corev1.ServiceAccount
	namespaces   []*corev1.Namespace
}

// load decodes every manifest strictly (unknown or misspelt fields fail)
// into the Kubernetes API type of its kind.
func load(t *testing.T) objects {
	t.Helper()
	var o objects
	raw, err := fs.ReadFile(files, "kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeStrict(raw, &o.kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	listed := map[string]bool{"kustomization.yaml": true}
	for _, res := range o.kust.Resources {
		listed[res] = true
		raw, err := fs.ReadFile(files, path.Join("kubernetes", res))
		if err != nil {
			t.Fatalf("kustomization resource %s: %v", res, err)
		}
		for i, doc := range bytes.Split(raw, []byte("\n---\n")) {
			var meta struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s document %d: %v", res, i, err)
			}
			var obj any
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 DaemonSet":
				ds := &appsv1.DaemonSet{}
				o.daemonSets, obj = append(o.daemonSets, ds), ds
			case "apps/v1 StatefulSet":
				ss := &appsv1.StatefulSet{}
				o.statefulSets, obj = append(o.statefulSets, ss), ss
			case "v1 Service":
				svc := &corev1.Service{}
				o.services, obj = append(o.services, svc), svc
			case "v1 ServiceAccount":
				sa := &corev1.ServiceAccount{}
				o.accounts, obj = append(o.accounts, sa), sa
			case "v1 Namespace":
				ns := &corev1.Namespace{}
				o.namespaces, obj = append(o.namespaces, ns), ns
			default:
				t.Fatalf("%s document %d: no API type for %s %s in this test", res, i, meta.APIVersion, meta.Kind)
			}
			if err := decodeStrict(doc, obj); err != nil {
				t.Fatalf("%s document %d (%s): %v", res, i, meta.Kind, err)
			}
		}
	}
	entries, err := fs.ReadDir(files, "kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !listed[e.Name()] {
			t.Errorf("kubernetes/%s is not in kustomization.yaml's resources", e.Name())
		}
	}
	return o
}

func TestManifestsDecodeStrictly(t *testing.T) {
	o := load(t)
	if len(o.daemonSets) != 1 || len(o.statefulSets) != 2 || len(o.namespaces) != 1 || len(o.accounts) != 3 || len(o.services) != 3 {
		t.Fatalf("manifests: %d DaemonSets, %d StatefulSets (coordinator, jobs), %d Namespaces, %d ServiceAccounts, %d Services; want 1, 2, 1, 3, 3",
			len(o.daemonSets), len(o.statefulSets), len(o.namespaces), len(o.accounts), len(o.services))
	}
	if o.kust.Namespace != o.namespaces[0].Name {
		t.Errorf("kustomization namespace %q, Namespace manifest %q", o.kust.Namespace, o.namespaces[0].Name)
	}
}

// TestStrictDecodingCatchesTypos makes sure the test above can fail.
func TestStrictDecodingCatchesTypos(t *testing.T) {
	for _, spec := range []string{"hostPid: true", "hostPIDs: true", "hostPID: true\n      hostPID: false"} {
		bad := []byte("apiVersion: apps/v1\nkind: DaemonSet\nspec:\n  template:\n    spec:\n      " + spec + "\n")
		if err := decodeStrict(bad, &appsv1.DaemonSet{}); err == nil {
			t.Errorf("%q decoded without error", spec)
		}
	}
}

func container(t *testing.T, spec corev1.PodSpec) corev1.Container {
	t.Helper()
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("want one container, got %d (+%d init)", len(spec.Containers), len(spec.InitContainers))
	}
	return spec.Containers[0]
}

// TestAgentDaemonSetGrantsAgentPrivileges: the DaemonSet grants exactly the
// capabilities, host paths and host namespaces in AgentPrivileges.
func TestAgentDaemonSetGrantsAgentPrivileges(t *testing.T) {
	ds := load(t).daemonSets[0]
	spec := ds.Spec.Template.Spec
	c := container(t, spec)
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("agent container has no securityContext.capabilities")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("agent container is privileged; grant AgentPrivileges instead")
	}
	if !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("capabilities.drop %v, want ALL (only AgentPrivileges added back)", sc.Capabilities.Drop)
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Error("the agent must run as root (uid 0): it checks, and its shim switches users")
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("agent container: want the runtime's default seccomp profile")
	}

	var wantCaps, gotCaps []string
	wantMounts := map[string]bool{} // host path -> writable
	wantPod := map[string]bool{}
	for _, p := range AgentPrivileges {
		switch {
		case p.Capability != "":
			wantCaps = append(wantCaps, p.Capability)
		case p.HostPath != "":
			wantMounts[p.HostPath] = p.Writable
		case p.Pod != "":
			wantPod[p.Pod] = true
		}
	}
	for _, c := range sc.Capabilities.Add {
		gotCaps = append(gotCaps, string(c))
	}
	slices.Sort(wantCaps)
	slices.Sort(gotCaps)
	if diff := cmp.Diff(wantCaps, gotCaps); diff != "" {
		t.Errorf("capabilities.add differs from AgentPrivileges (-want +got):\n%s", diff)
	}

	gotPod := map[string]bool{"hostPID": spec.HostPID, "hostNetwork": spec.HostNetwork, "hostIPC": spec.HostIPC}
	for name, on := range gotPod {
		if on != wantPod[name] {
			t.Errorf("%s = %v; AgentPrivileges says %v", name, on, wantPod[name])
		}
	}
	if spec.HostNetwork && spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("dnsPolicy %q: with hostNetwork the agent resolves the coordinator's Service only with ClusterFirstWithHostNet", spec.DNSPolicy)
	}

	hostPaths := map[string]string{} // volume name -> host path
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	gotMounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		hp, ok := hostPaths[m.Name]
		if !ok {
			continue
		}
		if m.MountPath != hp {
			t.Errorf("host path %s mounted at %s; the agent expects it at the same path", hp, m.MountPath)
		}
		gotMounts[hp] = !m.ReadOnly
	}
	if diff := cmp.Diff(wantMounts, gotMounts); diff != "" {
		t.Errorf("host paths (path -> writable) differ from AgentPrivileges (-want +got):\n%s", diff)
	}

	// The host's cgroup namespace: see agent.yaml.
	if len(c.Command) < 3 || c.Command[0] != "nsenter" || c.Command[1] != "--cgroup=/proc/1/ns/cgroup" {
		t.Errorf("command %v: want the agent started in the host's cgroup namespace (nsenter --cgroup=/proc/1/ns/cgroup)", c.Command)
	}
	if !gotPod["hostPID"] || !slices.Contains(wantCaps, "SYS_PTRACE") || !slices.Contains(wantCaps, "SYS_ADMIN") {
		t.Error("nsenter --cgroup=/proc/1/ns/cgroup needs hostPID, SYS_ADMIN and SYS_PTRACE")
	}
	// Restarts leave tasks alone (KillMode=process): no preStop hook.
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		t.Error("a preStop hook runs before every agent restart; nothing may happen to tasks then")
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.Exec == nil || !slices.Equal(c.ReadinessProbe.Exec.Command, []string{"slackline-healthcheck"}) {
		t.Errorf("readiness probe %+v: want slackline-healthcheck (gRPC health over TLS)", c.ReadinessProbe)
	}
	if c.LivenessProbe != nil {
		t.Error("no liveness probe on the agent: a restart is not free for its tasks")
	}
	if ds.Spec.Template.Spec.TerminationGracePeriodSeconds == nil {
		t.Error("set terminationGracePeriodSeconds explicitly (the unit's TimeoutStopSec)")
	}
}

// TestEveryFeatureProbeHasAPrivilege: a new eBPF probe must say which
// privilege it needs before the DaemonSet can be trusted to grant it.
func TestEveryFeatureProbeHasAPrivilege(t *testing.T) {
	covered := map[string]bool{}
	for _, p := range AgentPrivileges {
		set := 0
		for _, v := range []string{p.Capability, p.HostPath, p.Pod} {
			if v != "" {
				set++
			}
		}
		if set != 1 || p.Why == "" {
			t.Errorf("privilege %+v: set exactly one of Capability, HostPath and Pod, and Why", p)
		}
		for _, f := range p.Features {
			covered[f] = true
		}
	}
	for _, f := range bpf.Features {
		if !covered[f.Name] {
			t.Errorf("bpf feature probe %q: no AgentPrivileges entry names it", f.Name)
		}
	}
}

func TestCoordinatorRunsUnprivileged(t *testing.T) {
	ss := load(t).statefulSets[0]
	spec := ss.Spec.Template.Spec
	c := container(t, spec)
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 1 {
		t.Error("one coordinator replica: bbolt is a single-writer file (three need the etcd store)")
	}
	psc, sc := spec.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot:
		t.Error("coordinator: runAsNonRoot")
	case sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("coordinator: allowPrivilegeEscalation false")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("coordinator: read-only root filesystem")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Error("coordinator: drop every capability, add none")
	case spec.HostNetwork || spec.HostPID:
		t.Error("coordinator: no host namespaces")
	}
	if len(ss.Spec.VolumeClaimTemplates) != 1 {
		t.Fatal("the registry needs a volume claim template")
	}
	workDir := flagValue(c.Args, "--work-dir")
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == ss.Spec.VolumeClaimTemplates[0].Name && m.MountPath == workDir)
	}
	if !mounted {
		t.Errorf("--work-dir %q is not the registry volume's mount path", workDir)
	}
}

// TestCredentialFiles: every credential file a container names comes from
// a mounted Secret key or host directory under the contract's file names.
func TestCredentialFiles(t *testing.T) {
	o := load(t)
	keys := map[string][]string{} // Secret -> keys
	for _, g := range o.kust.SecretGenerator {
		for _, f := range g.Files {
			key, _, _ := strings.Cut(f, "=")
			keys[g.Name] = append(keys[g.Name], key)
		}
	}
	want := map[string][]string{
		"slackline-coordinator-credentials": {"ca.crt", "coordinator.crt", "coordinator.key", "coordinator-client.crt", "coordinator-client.key"},
		"slackline-authz":                   {"authz.yaml"},
		"slackline-jobs-credentials":        {"jobs.token"},
	}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Errorf("Secrets and their keys (-contract +secretGenerator):\n%s", diff)
	}
	// A flag's file must be a key of the Secret mounted at its directory
	// (or, for the agent's own certificate, a file of the node's directory).
	check := func(who string, spec corev1.PodSpec, flags map[string]string) {
		t.Helper()
		c := container(t, spec)
		secretAt := map[string]string{} // mount path -> Secret
		for _, v := range spec.Volumes {
			for _, m := range c.VolumeMounts {
				if m.Name == v.Name && v.Secret != nil {
					secretAt[m.MountPath] = v.Secret.SecretName
				}
			}
		}
		for flag, file := range flags {
			value := flagValue(c.Args, flag)
			if path.Base(value) != file {
				t.Errorf("%s %s names %q, want a file named %q", who, flag, value, file)
				continue
			}
			if secret, ok := secretAt[path.Dir(value)]; ok && !slices.Contains(keys[secret], file) {
				t.Errorf("%s %s=%s: Secret %s has no key %s", who, flag, value, secret, file)
			}
		}
	}
	check("coordinator", o.statefulSets[0].Spec.Template.Spec,
		map[string]string{"--tls-cert": "coordinator.crt", "--tls-key": "coordinator.key", "--client-ca": "ca.crt", "--authz": "authz.yaml",
			"--agent-client-cert": "coordinator-client.crt", "--agent-client-key": "coordinator-client.key"})
	check("jobs", o.statefulSets[1].Spec.Template.Spec,
		map[string]string{"--tls-cert": "coordinator.crt", "--tls-key": "coordinator.key", "--client-ca": "ca.crt", "--authz": "authz.yaml",
			"--ca": "ca.crt", "--token-file": "jobs.token"})
	check("agent", o.daemonSets[0].Spec.Template.Spec,
		map[string]string{"--ca": "ca.crt", "--cert": "agent-$(NODE_NAME).crt", "--key": "agent-$(NODE_NAME).key", "--authz": "authz.yaml"})
}

func TestServicesSelectTheirPods(t *testing.T) {
	o := load(t)
	for _, svc := range o.services {
		selected := 0
		for _, ss := range o.statefulSets {
			labels := ss.Spec.Template.Labels
			matches := len(svc.Spec.Selector) > 0
			for k, v := range svc.Spec.Selector {
				matches = matches && labels[k] == v
			}
			if matches {
				selected++
			}
		}
		if selected != 1 {
			t.Errorf("Service %s selects the pods of %d StatefulSets, want 1", svc.Name, selected)
		}
	}
	for _, ss := range o.statefulSets {
		if ss.Spec.ServiceName == "" {
			t.Errorf("StatefulSet %s needs its governing Service", ss.Name)
		}
	}
}

// TestJobServiceRunsUnprivileged: slackline-jobs runs as the coordinator
// does, unprivileged, one replica, its store on its volume.
func TestJobServiceRunsUnprivileged(t *testing.T) {
	ss := load(t).statefulSets[1]
	if ss.Name != "slackline-jobs" {
		t.Fatalf("second StatefulSet %s, want slackline-jobs", ss.Name)
	}
	spec := ss.Spec.Template.Spec
	c := container(t, spec)
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 1 {
		t.Error("one job service replica: bbolt is a single-writer file")
	}
	psc, sc := spec.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot:
		t.Error("jobs: runAsNonRoot")
	case sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("jobs: allowPrivilegeEscalation false")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("jobs: read-only root filesystem")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Error("jobs: drop every capability, add none")
	case spec.HostNetwork || spec.HostPID:
		t.Error("jobs: no host namespaces")
	}
	for _, flag := range []string{"--coordinator", "--listen", "--work-dir"} {
		if flagValue(c.Args, flag) == "" {
			t.Errorf("jobs: %s missing", flag)
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (len(ss.Spec.VolumeClaimTemplates) == 1 && m.Name == ss.Spec.VolumeClaimTemplates[0].Name && m.MountPath == flagValue(c.Args, "--work-dir"))
	}
	if !mounted {
		t.Error("jobs: --work-dir is not the volume claim's mount path")
	}
}

// flagValue returns the value of --name=value in args.
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}
