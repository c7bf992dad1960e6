package master

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore/masterpb"
	"github.com/mooncake-go/mooncake/transfer/metaserver"
)

// TestExpiredClientCleanupHonoursClusterID: with MC_METADATA_CLUSTER_ID
// set, engines publish under mooncake/<id>/; the master's cleanup of an
// expired client deletes those keys, not the unprefixed ones.
func TestExpiredClientCleanupHonoursClusterID(t *testing.T) {
	t.Setenv("MC_METADATA_CLUSTER_ID", "c7")
	md := metaserver.New()
	cl := startBufconn(t, newExpiringServer(t, md))
	c := ctx(t)
	cl.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "dead", Segment: seg("d", 1<<20)})
	keys := []string{"mooncake/c7/ram/host-d", "mooncake/c7/rpc_meta/host-d"}
	for _, k := range keys {
		md.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("PUT", "/metadata?key="+k, strings.NewReader("{}")))
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, k := range keys {
		for {
			if _, ok := md.Get(k); !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s of the expired client was not cleaned up", k)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
