package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/cmd/mooncake/troubleshoot"
	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/transfer/metadata"
)

// maxCrossChecked bounds how many mounted segments the cluster check looks
// up in the metadata server.
const maxCrossChecked = 8

// checkMetadata checks the metadata server answers and round-trips a key
// (put, get, delete), then that it holds the descriptors of the segments
// the master has mounted under this host's MC_METADATA_CLUSTER_ID: if
// not, this host and the segments' owners use different cluster ids or
// metadata servers.
func checkMetadata(ctx context.Context, cfg Config, env environ, m masterFacts) []Result {
	if cfg.Metadata == "" {
		return []Result{skipped("metadata", "no metadata server given (--metadata or MC_METADATA_SERVER)")}
	}
	conn, err := metadata.ParseConn(cfg.Metadata)
	if err != nil {
		return []Result{finding("metadata", Failure, fmt.Sprintf("metadata server %q: %v", cfg.Metadata, err),
			`write it as "http://host:8080/metadata", "etcd://host:2379", "redis://host:6379" or "P2PHANDSHAKE"`)}
	}
	if conn.Kind == "p2p" {
		return []Result{ok("metadata", "P2PHANDSHAKE: peers exchange descriptors directly, no metadata server")}
	}
	store, err := metadata.Open(conn)
	if err != nil {
		return []Result{problem("metadata", Failure, troubleshoot.MetadataUnreachable, fmt.Sprintf("metadata server %s: %v", cfg.Metadata, err))}
	}
	defer store.Close()
	cluster := env.value(envvars.MetadataClusterID, "")
	host, _ := os.Hostname()
	key := metadata.SegmentKey(cluster, fmt.Sprintf("doctor/%s-%d", host, os.Getpid()))
	if err := roundTrip(ctx, cfg.Timeout, store, key); err != nil {
		return []Result{problem("metadata", Failure, troubleshoot.MetadataUnreachable, fmt.Sprintf("metadata server %s: %v", cfg.Metadata, err))}
	}
	out := []Result{ok("metadata", fmt.Sprintf("metadata server %s round-trips a key (%s)", cfg.Metadata, key))}
	return append(out, crossCheckSegments(ctx, cfg, store, cluster, m))
}

// roundTrip puts a key, reads it back, and deletes it.
func roundTrip(ctx context.Context, timeout time.Duration, s metadata.Store, key string) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	want := fmt.Appendf(nil, `{"mooncake_doctor":%d}`, time.Now().UnixNano())
	if err := s.Put(cctx, key, want); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	got, err := s.Get(cctx, key)
	if err != nil {
		return fmt.Errorf("get after put: %w", err)
	}
	if !bytes.Equal(bytes.TrimSpace(got), want) {
		return fmt.Errorf("get returned %q, not the %q just put", got, want)
	}
	if err := s.Delete(cctx, key); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	return nil
}

// mountedSegment is the part of the master's /api/v1/segments/status used
// here (/get_all_segments lists names only, as upstream's).
type mountedSegment struct {
	Name       string `json:"name"`
	TEEndpoint string `json:"te_endpoint"`
}

func crossCheckSegments(ctx context.Context, cfg Config, store metadata.Store, cluster string, m masterFacts) Result {
	const check = "metadata.cluster"
	if m.admin == "" {
		return skipped(check, "no master admin endpoint to list mounted segments from")
	}
	segs, err := mountedSegments(ctx, cfg, m.admin)
	if err != nil {
		return finding(check, Warning, fmt.Sprintf("list mounted segments from %s: %v", m.admin, err),
			"check the master's admin endpoint (--metrics_port)")
	}
	if len(segs) == 0 {
		return ok(check, "the master has no segments mounted; nothing to look up")
	}
	shown := cluster
	if shown == "" {
		shown = "(unset)"
	}
	var missing []string
	found := 0
	for _, sg := range segs[:min(len(segs), maxCrossChecked)] {
		key := metadata.SegmentKey(cluster, sg.TEEndpoint)
		cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		_, err := store.Get(cctx, key)
		cancel()
		switch {
		case err == nil:
			found++
		case errors.Is(err, metadata.ErrNotFound):
			missing = append(missing, fmt.Sprintf("%s (%s)", sg.TEEndpoint, key))
		default:
			return problem(check, Failure, troubleshoot.MetadataUnreachable, fmt.Sprintf("get %s: %v", key, err))
		}
	}
	if len(missing) == 0 {
		return ok(check, fmt.Sprintf("descriptors of %d mounted segments found with MC_METADATA_CLUSTER_ID %s", found, shown))
	}
	msg := fmt.Sprintf("the metadata server has no descriptor of %d of %d mounted segments under this host's MC_METADATA_CLUSTER_ID %s: %s",
		len(missing), found+len(missing), shown, strings.Join(missing, ", "))
	if cluster != "" {
		cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		_, err := store.Get(cctx, metadata.SegmentKey("", segs[0].TEEndpoint))
		cancel()
		if err == nil {
			msg += "; they are published without a cluster id"
		}
	}
	return problem(check, Failure, troubleshoot.SegmentNameMismatch, msg)
}

func mountedSegments(ctx context.Context, cfg Config, admin string) ([]mountedSegment, error) {
	cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, "http://"+admin+"/api/v1/segments/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := directHTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("http %d", resp.StatusCode)
	}
	var segs []mountedSegment
	return segs, json.NewDecoder(resp.Body).Decode(&segs)
}
