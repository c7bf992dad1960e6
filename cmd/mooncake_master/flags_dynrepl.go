package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/kvstore/master"
)

// dynReplFlags are upstream's dynamic replication flags as given.
type dynReplFlags struct {
	mode   string
	window int
}

// declareDynReplFlags declares them into fs; the rate and the replica
// bound go straight into o.cfg.DynamicReplication.
func declareDynReplFlags(fs *flag.FlagSet, o *options) {
	c := &o.cfg.DynamicReplication
	fs.StringVar(&o.dynRepl.mode, "dynamic_replication_mode", "off", "hot keys get one more memory replica: off, observe (count the proposals only) or enforce (queue copy tasks)")
	fs.IntVar(&o.dynRepl.window, "dynamic_replication_heat_window_seconds", int(c.HeatWindow/time.Second), "seconds of the window a key's reads are counted in")
	fs.Float64Var(&c.AdmissionQPS, "dynamic_replication_admission_qps_threshold", c.AdmissionQPS, "reads per second over the window that admit a key")
	fs.IntVar(&c.MaxMemoryReplicas, "dynamic_replication_max_memory_replicas", c.MaxMemoryReplicas, "readable memory replicas a key may reach this way")
}

// checkDynReplFlags puts the mode and window into the configuration.
func checkDynReplFlags(o *options) error {
	mode, err := master.ParseDynamicReplicationMode(o.dynRepl.mode)
	if err != nil {
		return fmt.Errorf("--dynamic_replication_mode=%s: want off, observe or enforce", o.dynRepl.mode)
	}
	c := &o.cfg.DynamicReplication
	switch {
	case o.dynRepl.window < 1:
		return fmt.Errorf("--dynamic_replication_heat_window_seconds=%d: want at least 1", o.dynRepl.window)
	case !(c.AdmissionQPS > 0):
		return fmt.Errorf("--dynamic_replication_admission_qps_threshold=%v: want a positive rate", c.AdmissionQPS)
	case c.MaxMemoryReplicas < 1:
		return fmt.Errorf("--dynamic_replication_max_memory_replicas=%d: want at least 1", c.MaxMemoryReplicas)
	}
	c.Mode, c.HeatWindow = mode, time.Duration(o.dynRepl.window)*time.Second
	return nil
}
