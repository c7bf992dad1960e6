package envvars

// The Redis server's credentials and database (internal/redis), read
// wherever a redis:// connection string is used: the HA master
// (--ha_backend_type=redis), a store client following the leader
// (master_server_addr="redis://..."), and the Transfer Engine's metadata.
var (
	RedisUsername = &Var{Name: "MC_REDIS_USERNAME", Kind: Text, Default: "none (AUTH with the password only)",
		ReadBy: "internal/redis", Doc: "Redis ACL user sent with AUTH; used only with MC_REDIS_PASSWORD"}
	RedisPassword = &Var{Name: "MC_REDIS_PASSWORD", Kind: Text, Default: "none (no AUTH)",
		ReadBy: "internal/redis", Doc: "Redis password: every connection sends AUTH [user] password first",
		Secret: true}
	RedisDBIndex = &Var{Name: "MC_REDIS_DB_INDEX", Kind: Int, Min: 0, Max: 255, Default: "0",
		ReadBy: "internal/redis", Doc: "Redis database every connection SELECTs; a value out of range or not a number is refused"}
)

func init() { All = append(All, RedisUsername, RedisPassword, RedisDBIndex) }
