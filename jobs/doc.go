// Package jobs is the decision core of the job service (slackline-jobs,
// docs/jobs.md): job specs, the queue of each role, indexed completions,
// retries with backoff, revocable policies, preemptions, deadlines and
// cron schedules. It does no I/O and reads no clock.
//
// # Specs
//
// ParseSpec reads a YAML or JSON spec, fills in its defaults and validates
// it; every error is a *FieldError naming the field and wraps
// ErrInvalidSpec.
//
// # The core
//
// A Core holds the jobs. Its operations take the time as an argument and
// return what the shell must do:
//
//   - Submit and Cancel add and end jobs (Cancel returns the tasks to kill).
//   - Offers places ready indexes on offers, per role in queue order
//     (priority, then submission), within each job's parallelism and
//     revocable policy (only: slack cpus; prefer: slack, or regular ones
//     once an index waited prefer_wait; never: regular only), and declines
//     the rest. Revocable offers are held (HoldFor) until a regular offer
//     of the same agent brings the memory their tasks need; Tick releases
//     those held too long, Rescind those taken back.
//   - Update applies a task status. A FINISHED task succeeds its index; a
//     task preempted (REASON_CONTAINER_PREEMPTED: a QoS correction or a
//     revocation; REASON_AGENT_DRAINED: maintenance) or lost (its agent or
//     the coordinator lost it) is re-queued at once without counting as a
//     failure, with an event saying why; any other terminal state is a
//     failure, retried after an exponential backoff until the index has
//     more failures than the job's retries, which fails the job with the
//     last task's state, reason and message.
//   - LaunchFailed handles an Accept call that failed: the coordinator may
//     have launched its tasks, so they stay launched and are reconciled
//     (Effects.Reconcile, again every ReconcileEvery until the
//     coordinator answers); a status of the task confirms it, GONE or
//     UNKNOWN re-queues the index as a loss. An index is never relaunched
//     while its earlier task may run. NotLaunched re-queues tasks whose
//     Accept was never sent.
//   - Tick applies time: deadlines, expired backoffs (revivals) and cron
//     runs, each a job of its own, started under the cron job's
//     concurrency policy (forbid skips a run while one is active, allow
//     starts it beside, replace cancels the active ones). NextWake says
//     when Tick next has work.
//
// Every operation also returns the suppressions and revivals its roles
// need (Effects): a role with no launchable work is suppressed, and a role
// whose work arrives (a submission, a re-queued index, an expired backoff)
// is revived, which also clears the refusals of offers declined earlier.
//
// # Persistence contract
//
// The core marks what each operation changes; TakeDirty hands out the
// changed jobs (one record each, without indexes), indexes (one record
// each) and deleted jobs. The shell must write them before it launches
// the tasks an Offers plan names (a task id is never launched unrecorded)
// and before it acknowledges the updates applied, so that a restarted
// service resumes from its records: Restore rebuilds each job and Launched
// lists the tasks to reconcile. Each pending index records its place in
// its job's queue (Index.Queued), so that a restored core launches
// re-queued indexes in the order the running one would have.
//
// # Limits
//
// A core keeps at most Config.MaxJobs jobs, MaxEvents events per job and
// MaxRunsKept runs per cron job; LimitHits counts each limit hit by name.
package jobs
