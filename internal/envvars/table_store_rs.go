package envvars

// The Store-RS variables (docs/store-operations.md): setup fallbacks read
// by the Python store, tracing read by the store client.
var (
	StoreRSTrace = &Var{Name: "MC_STORE_RS_TRACE", Kind: Bool, Default: "false",
		ReadBy: "kvstore/client", Doc: "store client tracing: one log line per API call and phase (stderr, or MC_STORE_RS_TRACE_FILE)"}
	StoreRSTraceFile = &Var{Name: "MC_STORE_RS_TRACE_FILE", Kind: Text, Default: "none",
		ReadBy: "kvstore/client", Doc: "file the trace log lines are appended to (turns tracing on)"}
	StoreRSTraceJSONL = &Var{Name: "MC_STORE_RS_TRACE_JSONL_FILE", Kind: Text, Default: "none",
		ReadBy: "kvstore/client", Doc: "file one JSON span per API call and phase is appended to"}
	StoreRSTraceKeyMode = &Var{Name: "MC_STORE_RS_TRACE_KEY_MODE", Kind: Enum, Values: []string{"hash", "full"}, Default: "hash",
		ReadBy: "kvstore/client", Doc: "how spans show keys: hash (FNV-1a 64, hex) or full (local debugging only)"}
)

var storeRSVars = []*Var{
	StoreRSTrace, StoreRSTraceFile, StoreRSTraceJSONL, StoreRSTraceKeyMode,
	{Name: "MC_STORE_RS_KEYSPACE", Kind: Text, Default: "none",
		ReadBy: "python", Doc: "store setup: keyspace of the namespace (setup's keyspace)"},
	{Name: "MC_STORE_RS_TENANT", Kind: Text, Default: "none",
		ReadBy: "python", Doc: "store setup: tenant of the namespace (setup's tenant; not tenant_id)"},
	{Name: "MC_STORE_RS_DOMAIN", Kind: Text, Default: "none",
		ReadBy: "python", Doc: "store setup: domain of the namespace (setup's domain)"},
	{Name: "MC_STORE_RS_OBJECT_SET", Kind: Text, Default: "none",
		ReadBy: "python", Doc: "store setup: object set of the namespace (setup's object_set)"},
	{Name: "MC_STORE_RS_EVICTION_HIGH_WATERMARK_PERCENT", Kind: Int, Min: 1, Max: 100, Default: "none (90 when the low one is set)",
		ReadBy: "python", Doc: "store setup: segment fill that starts eviction, percent"},
	{Name: "MC_STORE_RS_EVICTION_LOW_WATERMARK_PERCENT", Kind: Int, Min: 0, Max: 99, Default: "none (80 when the high one is set)",
		ReadBy: "python", Doc: "store setup: segment fill eviction stops at, percent (below the high one)"},
}

func init() { All = append(All, storeRSVars...) }
