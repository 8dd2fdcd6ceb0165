package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/slackline/slackline/internal/privileged"
)

// HelmModule is the Helm release the tests lint and render the chart with:
// Helm itself, run from the Go module proxy (`go run`), so that nothing
// but Go is needed. It is not a tool dependency of this module: its
// Kubernetes libraries are newer than the ones the tests decode with.
const HelmModule = "helm.sh/helm/v3/cmd/helm@v3.22.0"

// chart is the Helm chart's directory, relative to deploy/.
const chart = "helm/slackline"

// helm runs Helm with args and returns its standard output. A Helm that
// cannot be fetched skips the test, unless SLACKLINE_TEST_PRIVILEGED=1 (CI).
func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", append([]string{"run", HelmModule}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	if err := cmd.Run(); err != nil {
		if strings.Contains(stderr.String(), "go: ") && !strings.Contains(stderr.String(), "Error:") {
			if os.Getenv(privileged.EnvVar) == "1" {
				t.Fatalf("cannot run %s: %v\n%s", HelmModule, err, stderr.String())
			}
			t.Skipf("cannot run %s (module proxy unreachable?): %v", HelmModule, err)
		}
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes()
}

// serviceMonitor is the part of the prometheus-operator's ServiceMonitor
// the chart uses; decoding it strictly fails on any other field.
type serviceMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Scheme        string `json:"scheme"`
			Interval      string `json:"interval"`
			Authorization struct {
				Credentials corev1.SecretKeySelector `json:"credentials"`
			} `json:"authorization"`
			TLSConfig struct {
				ServerName string `json:"serverName"`
				CA         struct {
					Secret corev1.SecretKeySelector `json:"secret"`
				} `json:"ca"`
			} `json:"tlsConfig"`
			Relabelings []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
				Replacement  string   `json:"replacement"`
			} `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered are the chart's objects, decoded strictly.
type rendered struct {
	daemonSets      []*appsv1.DaemonSet
	statefulSets    []*appsv1.StatefulSet
	services        []*corev1.Service
	accounts        []*corev1.ServiceAccount
	configMaps      []*corev1.ConfigMap
	budgets         []*policyv1.PodDisruptionBudget
	serviceMonitors []*serviceMonitor
}

// render runs helm template with the values given (--set) in namespace
// slackline and decodes every document strictly into its API type.
func render(t *testing.T, set ...string) rendered {
	t.Helper()
	args := []string{"template", "slackline", chart, "--namespace", "slackline"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out := helm(t, args...)
	var r rendered
	for i, doc := range bytes.Split(out, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var meta struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		var obj any
		switch meta.APIVersion + " " + meta.Kind {
		case "apps/v1 DaemonSet":
			ds := &appsv1.DaemonSet{}
			r.daemonSets, obj = append(r.daemonSets, ds), ds
		case "apps/v1 StatefulSet":
			ss := &appsv1.StatefulSet{}
			r.statefulSets, obj = append(r.statefulSets, ss), ss
		case "v1 Service":
			svc := &corev1.Service{}
			r.services, obj = append(r.services, svc), svc
		case "v1 ServiceAccount":
			sa := &corev1.ServiceAccount{}
			r.accounts, obj = append(r.accounts, sa), sa
		case "v1 ConfigMap":
			cm := &corev1.ConfigMap{}
			r.configMaps, obj = append(r.configMaps, cm), cm
		case "policy/v1 PodDisruptionBudget":
			pdb := &policyv1.PodDisruptionBudget{}
			r.budgets, obj = append(r.budgets, pdb), pdb
		case "monitoring.coreos.com/v1 ServiceMonitor":
			sm := &serviceMonitor{}
			r.serviceMonitors, obj = append(r.serviceMonitors, sm), sm
		default:
			t.Fatalf("document %d: no API type for %s %s in this test", i, meta.APIVersion, meta.Kind)
		}
		if err := decodeStrict(doc, obj); err != nil {
			t.Fatalf("document %d (%s): %v\n%s", i, meta.Kind, err, doc)
		}
	}
	return r
}

// TestHelmLint: helm lint passes for one coordinator and for three.
func TestHelmLint(t *testing.T) {
	t.Parallel()
	helm(t, "lint", "--strict", chart)
	helm(t, "lint", "--strict", chart, "--set", "coordinator.replicas=3", "--set", "coordinator.etcd.endpoints=https://etcd:2379", "--set", "serviceMonitor.enabled=true")
}

// samePod compares a rendered pod spec with the kustomize manifests'
// (whose image kustomize sets from its images: entry).
func samePod(t *testing.T, what string, kustomized, helmed corev1.PodSpec) {
	t.Helper()
	kustomized.Containers = slices.Clone(kustomized.Containers)
	for i := range kustomized.Containers {
		kustomized.Containers[i].Image += ":latest"
		kustomized.Containers[i].ImagePullPolicy = corev1.PullIfNotPresent
	}
	// Order of environment variables, mounts and volumes means nothing
	// (a strategic-merge patch puts its additions first).
	opts := []cmp.Option{cmpopts.EquateEmpty(), cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 }),
		cmpopts.SortSlices(func(a, b corev1.EnvVar) bool { return a.Name < b.Name }),
		cmpopts.SortSlices(func(a, b corev1.VolumeMount) bool { return a.Name < b.Name }),
		cmpopts.SortSlices(func(a, b corev1.Volume) bool { return a.Name < b.Name })}
	if diff := cmp.Diff(kustomized, helmed, opts...); diff != "" {
		t.Errorf("%s: the chart's pod differs from deploy/kubernetes's (-kustomize +helm):\n%s", what, diff)
	}
}

// named returns the object of objs named name, or nil.
func named[T interface{ GetName() string }](objs []T, name string) T {
	for _, o := range objs {
		if o.GetName() == name {
			return o
		}
	}
	var zero T
	return zero
}

// names are the names of objs, sorted.
func names[T interface{ GetName() string }](objs []T) []string {
	var ns []string
	for _, o := range objs {
		ns = append(ns, o.GetName())
	}
	slices.Sort(ns)
	return ns
}

// TestHelmChartMatchesKustomize: the chart's default rendering is the
// kustomize base (the same pods, volume claims, Services and accounts:
// coordinator, agent and job service), and with three replicas the HA
// overlay (which keeps the base's job service); every object carries the
// standard labels with its component.
func TestHelmChartMatchesKustomize(t *testing.T) {
	t.Parallel()
	base := load(t)
	r := render(t)
	if len(r.daemonSets) != 1 || len(r.statefulSets) != 2 || len(r.services) != 3 || len(r.accounts) != 3 || len(r.serviceMonitors) != 0 || len(r.budgets) != 0 {
		t.Fatalf("rendered %d DaemonSets, %d StatefulSets, %d Services, %d ServiceAccounts, %d ServiceMonitors, %d budgets; want 1, 2, 3, 3, 0, 0",
			len(r.daemonSets), len(r.statefulSets), len(r.services), len(r.accounts), len(r.serviceMonitors), len(r.budgets))
	}
	for _, kind := range []struct {
		what       string
		kust, helm []string
	}{
		{"DaemonSets", names(base.daemonSets), names(r.daemonSets)},
		{"StatefulSets", names(base.statefulSets), names(r.statefulSets)},
		{"Services", names(base.services), names(r.services)},
		{"ServiceAccounts", names(base.accounts), names(r.accounts)},
	} {
		if !slices.Equal(kind.kust, kind.helm) {
			t.Fatalf("%s: kustomize has %v, the chart %v", kind.what, kind.kust, kind.helm)
		}
	}
	samePod(t, "agent DaemonSet", base.daemonSets[0].Spec.Template.Spec, r.daemonSets[0].Spec.Template.Spec)
	for _, ss := range base.statefulSets {
		got := named(r.statefulSets, ss.Name)
		samePod(t, ss.Name+" StatefulSet", ss.Spec.Template.Spec, got.Spec.Template.Spec)
		if diff := cmp.Diff(ss.Spec.VolumeClaimTemplates, got.Spec.VolumeClaimTemplates,
			cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
			t.Errorf("%s volume claim templates (-kustomize +helm):\n%s", ss.Name, diff)
		}
		if *ss.Spec.Replicas != *got.Spec.Replicas || ss.Spec.ServiceName != got.Spec.ServiceName || !cmp.Equal(ss.Spec.Selector, got.Spec.Selector) {
			t.Errorf("%s: replicas %d, service %q, selector %v; kustomize %d, %q, %v", ss.Name,
				*got.Spec.Replicas, got.Spec.ServiceName, got.Spec.Selector, *ss.Spec.Replicas, ss.Spec.ServiceName, ss.Spec.Selector)
		}
	}
	for _, svc := range base.services {
		if diff := cmp.Diff(svc.Spec, named(r.services, svc.Name).Spec); diff != "" {
			t.Errorf("Service %s (-kustomize +helm):\n%s", svc.Name, diff)
		}
	}
	for _, sa := range base.accounts {
		if got := named(r.accounts, sa.Name); !cmp.Equal(sa.AutomountServiceAccountToken, got.AutomountServiceAccountToken) {
			t.Errorf("ServiceAccount %s: automountServiceAccountToken %v, kustomize %v", sa.Name, got.AutomountServiceAccountToken, sa.AutomountServiceAccountToken)
		}
	}
	labels := []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/component", "app.kubernetes.io/part-of"}
	check := func(kind, name, component string, got map[string]string) {
		for _, l := range labels {
			if got[l] == "" {
				t.Errorf("%s %s lacks the label %s", kind, name, l)
			}
		}
		if got["app.kubernetes.io/component"] != component {
			t.Errorf("%s %s: component %q, want %q", kind, name, got["app.kubernetes.io/component"], component)
		}
	}
	components := map[string]string{"slackline-agent": "agent", "slackline-coordinator": "coordinator", "slackline-jobs": "jobs"}
	check("DaemonSet", "slackline-agent", "agent", r.daemonSets[0].Labels)
	check("DaemonSet pod", "slackline-agent", "agent", r.daemonSets[0].Spec.Template.Labels)
	for _, ss := range r.statefulSets {
		check("StatefulSet", ss.Name, components[ss.Name], ss.Labels)
		check("StatefulSet pod", ss.Name, components[ss.Name], ss.Spec.Template.Labels)
	}
	for _, svc := range r.services {
		check("Service", svc.Name, components[svc.Spec.Selector["app.kubernetes.io/name"]], svc.Labels)
	}
	for _, sa := range r.accounts {
		if c := sa.Labels["app.kubernetes.io/component"]; c != components[sa.Name] {
			t.Errorf("ServiceAccount %s: component %q, want %q", sa.Name, c, components[sa.Name])
		}
	}

	spec := r.daemonSets[0].Spec.Template.Spec
	if spec.PriorityClassName != "system-node-critical" || len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists || spec.Tolerations[0].Key != "" {
		t.Errorf("the agent must tolerate every taint and be system-node-critical: %v, %q", spec.Tolerations, spec.PriorityClassName)
	}

	// Three coordinators and three job service replicas: the HA overlay's
	// StatefulSets, peers Services and budget.
	k := haOverlay(t)
	ha := render(t, "coordinator.replicas=3", "jobs.replicas=3", "coordinator.etcd.endpoints="+strings.ReplaceAll(haEndpoints(t, k), ",", "\\,"))
	if len(ha.statefulSets) != 2 || len(ha.services) != 4 || len(ha.accounts) != 3 {
		t.Fatalf("HA: rendered %d StatefulSets, %d Services, %d ServiceAccounts; want 2, 4, 3", len(ha.statefulSets), len(ha.services), len(ha.accounts))
	}
	coordinator, jobs := named(base.statefulSets, "slackline-coordinator"), named(base.statefulSets, "slackline-jobs")
	haCoord, haJobs := named(ha.statefulSets, "slackline-coordinator"), named(ha.statefulSets, "slackline-jobs")
	if haCoord == nil || haJobs == nil {
		t.Fatalf("HA: StatefulSets %v, want slackline-coordinator and slackline-jobs", names(ha.statefulSets))
	}
	want := haCoordinator(t, coordinator, k.Patches[0].Path)
	samePod(t, "HA coordinator StatefulSet", want.Spec.Template.Spec, haCoord.Spec.Template.Spec)
	if *haCoord.Spec.Replicas != 3 || haCoord.Spec.PodManagementPolicy != want.Spec.PodManagementPolicy || len(haCoord.Spec.VolumeClaimTemplates) != 0 {
		t.Errorf("HA StatefulSet: replicas %d, policy %q, %d claims", *haCoord.Spec.Replicas, haCoord.Spec.PodManagementPolicy, len(haCoord.Spec.VolumeClaimTemplates))
	}
	wantJobs := haCoordinator(t, jobs, k.Patches[1].Path)
	samePod(t, "HA jobs StatefulSet", wantJobs.Spec.Template.Spec, haJobs.Spec.Template.Spec)
	peers := named(ha.services, "slackline-jobs-peers")
	checkHAJobs(t, haJobs, haCoord, peers, "slackline")
	wantAgents := haAgent(t, base.daemonSets[0], k.Patches[2].Path)
	samePod(t, "HA agent DaemonSet", wantAgents.Spec.Template.Spec, ha.daemonSets[0].Spec.Template.Spec)
	checkHAAgent(t, ha.daemonSets[0], haCoord, "slackline")
	if haJobs.Spec.ServiceName != wantJobs.Spec.ServiceName || haJobs.Spec.PodManagementPolicy != wantJobs.Spec.PodManagementPolicy {
		t.Errorf("HA jobs StatefulSet: service %q, policy %q; the overlay %q, %q", haJobs.Spec.ServiceName, haJobs.Spec.PodManagementPolicy, wantJobs.Spec.ServiceName, wantJobs.Spec.PodManagementPolicy)
	}
	// Three coordinators with one job service: it keeps its volume and
	// reaches every coordinator.
	one := render(t, "coordinator.replicas=3", "coordinator.etcd.endpoints="+strings.ReplaceAll(haEndpoints(t, k), ",", "\\,"))
	if j := named(one.statefulSets, "slackline-jobs"); *j.Spec.Replicas != 1 || len(j.Spec.VolumeClaimTemplates) != 1 ||
		flagValue(container(t, j.Spec.Template.Spec).Args, "--coordinator") != flagValue(container(t, haJobs.Spec.Template.Spec).Args, "--coordinator") {
		t.Errorf("one job service beside three coordinators: replicas %d, %d claims, --coordinator=%s", *j.Spec.Replicas, len(j.Spec.VolumeClaimTemplates),
			flagValue(container(t, j.Spec.Template.Spec).Args, "--coordinator"))
	}
	if len(ha.budgets) != 1 || ha.budgets[0].Spec.MinAvailable == nil || ha.budgets[0].Spec.MinAvailable.IntValue() != 2 {
		t.Errorf("HA: want a disruption budget of minAvailable 2: %v", ha.budgets)
	}
	if len(ha.configMaps) != 1 || ha.configMaps[0].Name != "slackline-etcd" || ha.configMaps[0].Data["endpoints"] != haEndpoints(t, k) {
		t.Errorf("HA: want the ConfigMap slackline-etcd with the endpoints: %v", ha.configMaps)
	}
}

// TestHelmJobsDisabled: jobs.enabled=false renders no job service (no
// StatefulSet, Service, account or ServiceMonitor of it) and leaves the
// rest as it was.
func TestHelmJobsDisabled(t *testing.T) {
	t.Parallel()
	r := render(t, "jobs.enabled=false", "serviceMonitor.enabled=true")
	if got := names(r.statefulSets); !slices.Equal(got, []string{"slackline-coordinator"}) {
		t.Errorf("StatefulSets %v, want only slackline-coordinator", got)
	}
	if got := names(r.services); slices.Contains(got, "slackline-jobs") || len(got) != 3 {
		t.Errorf("Services %v, want the coordinator's two and the agents'", got)
	}
	if got := names(r.accounts); !slices.Equal(got, []string{"slackline-agent", "slackline-coordinator"}) {
		t.Errorf("ServiceAccounts %v, want the agent's and the coordinator's", got)
	}
	for _, sm := range r.serviceMonitors {
		if sm.Metadata.Name == "slackline-jobs" {
			t.Errorf("ServiceMonitor slackline-jobs rendered with jobs.enabled=false")
		}
	}
	if len(r.daemonSets) != 1 || len(r.serviceMonitors) != 2 {
		t.Errorf("%d DaemonSets, %d ServiceMonitors; want 1, 2", len(r.daemonSets), len(r.serviceMonitors))
	}
}

// TestHelmServiceMonitor: with serviceMonitor.enabled, the three processes
// are scraped as jobs slackline-coordinator, slackline-agent and
// slackline-jobs, over verified TLS with a token.
func TestHelmServiceMonitor(t *testing.T) {
	t.Parallel()
	r := render(t, "serviceMonitor.enabled=true")
	if len(r.serviceMonitors) != 3 {
		t.Fatalf("%d ServiceMonitors, want 3", len(r.serviceMonitors))
	}
	services := map[string]*corev1.Service{}
	for _, svc := range r.services {
		services[svc.Name] = svc
	}
	seen := map[string]bool{}
	for _, sm := range r.serviceMonitors {
		name := sm.Spec.Selector.MatchLabels["app.kubernetes.io/name"]
		if name != "slackline-coordinator" && name != "slackline-agent" && name != "slackline-jobs" {
			t.Errorf("ServiceMonitor %s selects %q", sm.Metadata.Name, name)
		}
		seen[name] = true
		if services[name] == nil {
			t.Errorf("ServiceMonitor %s: no Service %s (the job name the rules expect)", sm.Metadata.Name, name)
		}
		for _, e := range sm.Spec.Endpoints {
			if svc := services[name]; svc != nil && !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == e.Port }) {
				t.Errorf("ServiceMonitor %s: Service %s has no port %q", sm.Metadata.Name, name, e.Port)
			}
			if e.Scheme != "https" || e.Path != "/metrics" || e.Authorization.Credentials.Name == "" || e.TLSConfig.CA.Secret.Key != "ca.crt" {
				t.Errorf("ServiceMonitor %s endpoint %+v: want https /metrics with a token and the CA", sm.Metadata.Name, e)
			}
		}
	}
	if len(seen) != 3 {
		t.Errorf("ServiceMonitors select %v, want each of slackline-coordinator, slackline-agent and slackline-jobs once", seen)
	}
}

// haOverlay decodes deploy/kubernetes-ha's kustomization.
func haOverlay(t *testing.T) haKustomization {
	t.Helper()
	var k haKustomization
	raw, err := files.ReadFile("kubernetes-ha/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeStrict(raw, &k); err != nil {
		t.Fatal(err)
	}
	return k
}

// haEndpoints is the overlay's etcd endpoints literal.
func haEndpoints(t *testing.T, k haKustomization) string {
	t.Helper()
	for _, g := range k.ConfigMapGenerator {
		for _, l := range g.Literals {
			if v, ok := strings.CutPrefix(l, "endpoints="); ok {
				return v
			}
		}
	}
	t.Fatal("the HA overlay has no endpoints literal")
	return ""
}
