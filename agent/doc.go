// Package agent is the Slackline node agent: the equivalent of a Mesos
// agent. It registers its resources with the coordinator, runs the tasks the
// coordinator sends in cgroups, reports their status updates reliably,
// estimates slack, protects guaranteed work with QoS controllers and
// serves the node-local NodeService.
//
// # Settings
//
// Options holds the agent's settings as an operator gives them: one field
// per slackline-agent flag (and key of its --config file, see
// internal/cliconfig) and a few without a flag (the logger, the supervisor
// command, backoff bounds). Options.AddFlags is the one place that declares
// each flag's name, default and help (DefaultOptions returns those
// defaults); Validate checks every setting without touching the host and
// names the flag of each problem; Build wires a runnable Agent from them:
// credentials (TLS, authorization, revocation list), the containerizer,
// the estimator and QoS controllers, the eBPF programs and network QoS as
// far as the kernel allows, and the monitor; Agent.Close releases what
// Build opened. Build starts loading package bpf's monitor in the
// background (its verification is most of a start): the agent registers
// meanwhile, GetFeatures says "loading", and the monitor's signals join
// once it is loaded (lateEBPF); the first registration logs the start's
// phases with their durations. slackline-agent is parse, Build, Run; the end-to-end tests
// build their agents the same way. Config is the level below: subsystems
// already built, handed to New (unit tests give it fakes).
//
// The estimator and QoS settings (IsSettingFlag: --estimator*,
// --fixed-revocable, --oversubscribe-memory, --qos-* but the loops'
// intervals) are declared, validated and built in agent/settings
// (settings.Settings, embedded in Options), which the coordinator uses to
// validate node profiles without linking the agent. They can also come as
// a settings map keyed by flag names, the --config format:
// Options.WithSettings applies one to a copy, through the flags' own
// parsers, and checks it with ValidateSettings (the part of Validate that
// covers them). NewControllers (settings.Settings') is the one place that
// builds an estimator and QoS controllers (Build, Validate, shadows and
// fleet profiles call it). --shadow NAME=FILE (at most two)
// runs such candidate settings in shadow (agent/shadow): the estimate loop
// hands every input it built for the active estimator, after the active
// estimate is published, to each shadow's own estimator, and the QoS loop
// every input to each shadow's controllers after the active corrections
// are applied; shadows are scored as backtest replays (GetShadows,
// slackline_agent_shadow_*) and never offered nor applied.
//
// # Structure
//
// Agent only wires subsystems; each owns its state and runs with Run(ctx)
// under one errgroup:
//
//   - session (agent/session): registration, the command stream,
//     heartbeats and status-update delivery; shared with the simulator.
//   - lifecycle: the executor of the pure task machine (agent/tasks).
//     Commands and container exits become events; the machine's effects
//     are performed in order: checkpoint, containers (agent/containerizer),
//     then status updates handed to the session. A task with an image
//     first gets it from the image store (agent/images, Config.Images:
//     pulled once, shared, leased to the container until its Destroy); a
//     failed pull fails the task with REASON_IMAGE_PULL_FAILED. After a
//     restart the store keeps the leases of the containers recovered.
//   - observer: points the monitor (agent/monitor) and the eBPF programs
//     (bpf/, bpf/netqos) at the running containers and the protected
//     cgroups, and tells the network subsystem which revocable tasks to pace.
//   - network (agent/network, with --network-interfaces and a bandwidth
//     resource): paces revocable egress to each task's allocation and to
//     the revocable bandwidth estimate or the QoS limit; samples the links;
//     restores the interfaces when it stops.
//   - estimateLoop: turns the monitor's history into the oversubscription
//     estimate (estimator/) and sends it when it changes; it runs once per
//     --oversubscribed-resources-interval, just after the monitor's first
//     sample following each tick, or at a sample a quarter interval or
//     less before the tick (estimateSchedule), so that each estimate has
//     seen every sample up to its time. The ticks are those of the
//     monitor's grid (internal/tick), fed to the schedule at the samples
//     (lazyTicks), and the estimates are made on the monitor's goroutine
//     at the end of its passes: the loop's own goroutine wakes only to
//     send an estimate that changed (or in a new session) and, on a timer,
//     when the monitor stalls. The QoS loop's periodic evaluations are
//     made there too.
//   - history (agent/history, view.go): the live view's 15 minutes of
//     per-container series and who-delayed-whom snapshots, recorded after
//     every monitor pass (monitor.Observe) and served by GetHistory and
//     GetDelays; nil without a monitor.
//   - qosLoop: evaluates the QoS controllers (qos/) on eBPF events and a
//     period and applies their corrections (throttle the revocable subtree,
//     preempt through the task machine). With a monitor sampling at least
//     as often as --qos-correction-interval-min, the period's evaluations
//     run right after a monitor pass, on a sample just taken
//     (qosSchedule), on the monitor's goroutine (the loop's own wakes for
//     threshold events and, on a timer, when the monitor stalls): a
//     correction the evaluation asks for is applied there, so a slow one
//     (a memory.high write that reclaims) delays the monitor's next pass.
//   - shadowSet (with --shadow): the shadows and the active settings'
//     score, run by the two loops above (the estimates' under
//     estimateLoop.mu, on the monitor's or the loop's goroutine; each
//     shadow has one lock per loop, held for memory only).
//   - node profiles (profile.go, #29): a ProfileApplyCommand's settings
//     (ProfileFlags only) are parsed over the agent's flags, validated and
//     built into a new estimator and QoS controller set, which
//     estimateLoop and qosLoop take at their next pass; heartbeats report
//     the profile run, a refusal and the signals rollouts are judged on.
//   - rolloutShadow (rolloutshadow.go, #29 item 5): a ProfileShadowCommand's
//     version of a profile, built as a ProfileApplyCommand's, run in shadow
//     by the two loops (one slot of shadow.MaxShadows, beside --shadow),
//     with the active estimates scored over the same inputs (both counters
//     restarting past the cold estimator's warm-up, its --estimator-window);
//     heartbeats report both (ProfileReport.shadow_*) and whether the agent can
//     shadow at all; GetShadows lists it as "rollout".
//   - sandboxes: bounds the disk tasks use (sandbox.go): kills a task whose
//     sandbox outgrows its disk resource (TASK_STATE_FAILED,
//     REASON_CONTAINER_LIMITATION_DISK), removes ended tasks' sandboxes
//     after Config.Sandbox.GCDelay, sooner and oldest first above the disk
//     watermark, never a live task's.
//   - fetch (agent/fetcher): downloads a task's CommandInfo.uris into its
//     sandbox during Launch (containerizer.Spec.Fetch), through a bounded
//     content cache under WorkDir/fetch; a failure ends the task
//     TASK_STATE_FAILED with REASON_FETCH_FAILED naming the URL.
//   - health (agent/health): checks tasks that have a health_check from
//     RUNNING until they are killed or end (HTTP and TCP on the task's own
//     loopback, COMMAND inside its container through containerizer.Exec);
//     changes of health become RUNNING updates with healthy set, a task
//     out of consecutive failures is killed with
//     REASON_TASK_HEALTH_CHECK_STATUS_FAILED.
//   - the NodeService HTTP handler (Handler), served by internal/server;
//     with Config.TLS over TLS with the agent's own certificate (the one it
//     dials the coordinator with), and with Config.Authz every caller is
//     authenticated and authorized by internal/auth's rules (a sandbox is
//     read by its framework's principal, recorded with the sandbox, or with
//     access_sandboxes).
//
// # Locks
//
// Each mutex guards one subsystem's state. Held for memory operations
// only, and leaves (no other lock is taken under them): lifecycle.mu (the
// task machine and its pending effects), qosLoop.mu (recent
// corrections), profileState.mu (the profile run and the one refused),
// rolloutShadow.mu (the rollout shadow and its counters; a candidate is
// built and run with it released) and startupTimeline.mu (the start's
// phases). observer.mu (tracked cgroups) is the exception: sync holds it
// while it reads the containerizer's containers (its lock under it),
// resolves new cgroups' ids (a syscall on cgroupfs), tracks and untracks
// them on the eBPF monitor (lateEBPF.mu under it, a map update each) and
// the TCP watcher, sets the monitor's targets and the network pacer's
// classes (tc changes through netlink), so the QoS loop's and
// NodeService's lookups of a tracked cgroup wait for a sync's writes.
// lateEBPF.mu is also held across a Track or Untrack's map update.
// estimateLoop.mu and qosLoop.evalMu serialise the estimates and the QoS
// evaluations, made on the monitor's goroutine or on the loop's own: each
// is held across a whole estimate or evaluation (its input's reads, the
// corrections' cgroup writes), taken under no other lock but the
// monitor's pass lock (Monitor.Sample calls its observer holding it; only
// Sample and Close take it, never an estimate or an evaluation). No
// lock is held during a checkpoint write (fsync) or an RPC: they happen
// on the subsystems' own goroutines with no lock held, so a slow disk
// delays only what must wait for it (the effects after the write), never
// an RPC handler or another loop. The agent's ids, the latest estimate,
// the profile settings the loops take next and the guaranteed run-queue
// p99 are atomics.
//
// # Reliability
//
// Everything the agent must not forget is checkpointed in a bbolt file
// (WorkDir/checkpoint.db) before it acts on it: its id and boot id, each
// task before its container starts, and each status update before it is
// sent. Updates are re-sent, one task at a time in order, until the
// framework's acknowledgement comes back through the coordinator. After a
// restart the containerizer re-adopts running containers and reports those
// that ended meanwhile with their real outcome; after a host reboot (another
// boot id) the agent's tasks are reported TASK_STATE_LOST and it registers as
// a new agent. A checkpoint write that fails is retried with backoff; the
// effects behind it wait, and none is lost.
//
// # Errors
//
// New fails with a message that says what is missing (root, cgroup write
// access, a work dir) and how to fix it. Run returns nil when its context is
// cancelled and an error only for failures it cannot ride out (a broken
// checkpoint, a NodeService port in use).
package agent
