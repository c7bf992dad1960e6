package main

import (
	"errors"
	"flag"
	"fmt"
)

// unsupportedFlags are upstream master flags this master accepts with
// their default values only: each needs something a build here lacks.
// A value other than the default is refused at startup, naming the flag
// and the reason, rather than ignored.
type unsupportedFlags struct {
	podName, podNS     string
	enableDiskEviction bool
}

// declareUnsupportedFlags declares them into fs with upstream's defaults.
func declareUnsupportedFlags(fs *flag.FlagSet, u *unsupportedFlags) {
	fs.StringVar(&u.podName, "pod_name", "", "holder identity for --ha_backend_type=k8s; only empty is supported (no k8s backend)")
	fs.StringVar(&u.podNS, "pod_namespace", "", "namespace of the k8s HA lease; only empty is supported (no k8s backend)")
	fs.BoolVar(&u.enableDiskEviction, "enable_disk_eviction", true, "let storage clients evict from the disk tier when it is full; false is not supported (set the clients' MOONCAKE_OFFLOAD_ENABLE_EVICTION instead)")
}

// check refuses every value other than the default, with the reason.
func (u *unsupportedFlags) check() error {
	var errs []error
	refuse := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if u.podName != "" || u.podNS != "" {
		refuse("--pod_name and --pod_namespace are not supported: they name the holder of the k8s HA lease, and this master elects its leader through etcd or Redis only")
	}
	if !u.enableDiskEviction {
		refuse("--enable_disk_eviction=false is not supported: the master does not steer its storage clients' disk eviction; set MOONCAKE_OFFLOAD_ENABLE_EVICTION=false on the storage clients")
	}
	return errors.Join(errs...)
}

// checkHABackend refuses the HA backends upstream has and this master
// lacks, whether or not --enable_ha is given.
func checkHABackend(t string) error {
	switch t {
	case "etcd", "redis":
		return nil
	case "k8s":
		return errors.New("--ha_backend_type=k8s is not supported: leader election on a Kubernetes Lease needs the Kubernetes API, which this master does not use (use --ha_backend_type=etcd or redis)")
	default:
		return fmt.Errorf("--ha_backend_type=%s: want etcd, redis or k8s (k8s is not supported)", t)
	}
}
