package master

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// Scenario commands of the disk tier (see scenario_test.go for the rest):
//
//	config ... offload=true [on_evict=true force_evict=true promote=true threshold=N queue=N cap=R per_heartbeat=N]
//	mount_disk [client=] [endpoint=] [objects=key:size,...]   unmount_disk [client=]
//	disk_heartbeat [client=] [dropped=a,b]   (prints the work handed out)
//	offload_done key= [client=] [fail]       promote_done key= replica=ID [client=] [fail]
//	disks

// offloadConfig reads the disk tier's settings of a config command.
func (c cmd) offloadConfig(t *testing.T) OffloadConfig {
	o := DefaultOffloadConfig()
	o.Enable = c.str("offload", "false") == "true"
	o.OnEvict = c.str("on_evict", "false") == "true"
	o.ForceEvict = c.str("force_evict", "false") == "true"
	o.PromotionOnHit = c.str("promote", "false") == "true"
	o.PromotionAdmissionThreshold = int(c.num(t, "threshold", uint64(o.PromotionAdmissionThreshold)))
	o.QueueLimit = int(c.num(t, "queue", uint64(o.QueueLimit)))
	o.CapRatio = c.float(t, "cap", o.CapRatio)
	o.PromotionMaxPerHeartbeat = int(c.num(t, "per_heartbeat", uint64(o.PromotionMaxPerHeartbeat)))
	return o
}

// runDisk runs a disk tier command; false for a command it does not know.
func (s *scenario) runDisk(c cmd, key, cl string) (string, bool) {
	t := s.t
	switch c.name {
	case "mount_disk":
		var objs []DiskObject
		for _, spec := range strings.Split(c.str("objects", ""), ",") {
			if k, size, ok := strings.Cut(spec, ":"); ok {
				n, _ := strconv.ParseUint(size, 0, 64)
				objs = append(objs, DiskObject{Key: s.st.Config().ObjectKey(DefaultTenant, k), Size: n})
			}
		}
		rejected, code := s.st.MountLocalDisk(cl, c.str("endpoint", cl+":9000"), c.num(t, "capacity", 1<<20), objs, s.now)
		if len(rejected) == 0 {
			return code.String() + "\n", true
		}
		return fmt.Sprintf("%s rejected %v\n", code.String(), rejected), true
	case "unmount_disk":
		return s.st.UnmountLocalDisk(cl, s.now).String() + "\n", true
	case "disk_heartbeat":
		var dropped []string
		if d := c.str("dropped", ""); d != "" {
			dropped = strings.Split(d, ",")
		}
		w, code := s.st.OffloadHeartbeat(cl, dropped, s.now)
		if code.String() != "OK" {
			return code.String() + "\n", true
		}
		var b strings.Builder
		for _, o := range w.Offloads {
			fmt.Fprintf(&b, "offload %s size=%d from %s+%d\n", o.Key, o.Size, o.Source.SegmentID, o.Source.Address-segBase)
		}
		for _, p := range w.Promotions {
			fmt.Fprintf(&b, "promote %s size=%d to %s+%d replica=%d\n", p.Key, p.Size, p.Target.SegmentID, p.Target.Address-segBase, p.Target.ID)
		}
		for _, k := range w.Deletes {
			fmt.Fprintf(&b, "delete %s\n", k)
		}
		if b.Len() == 0 {
			return "no work\n", true
		}
		return b.String(), true
	case "offload_done":
		return s.st.NotifyOffload(cl, key, !c.flags["fail"], s.now).String() + "\n", true
	case "promote_done":
		return s.st.NotifyPromotion(cl, key, c.num(t, "replica", 0), !c.flags["fail"], s.now).String() + "\n", true
	case "disks":
		var b strings.Builder
		for _, d := range s.st.LocalDisks() {
			fmt.Fprintf(&b, "%s at %s objects=%d offloads=%d promotions=%d\n", d.ClientID, d.Endpoint, d.Objects, d.PendingOffloads, d.PendingPromotion)
		}
		if b.Len() == 0 {
			return "none\n", true
		}
		return b.String(), true
	}
	return "", false
}
