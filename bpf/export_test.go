package bpf

// WithWakeupHooks returns cfg set to load the scheduler's wakeup variant
// (sched_wakeup, sched_wakeup_new and sched_switch_wakeups, for kernels
// without sched_info) whatever the kernel has, so that tests cover it.
func WithWakeupHooks(cfg Config) Config {
	cfg.wakeupHooks = true
	return cfg
}
