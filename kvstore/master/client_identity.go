package master

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/mooncake-go/mooncake/kvstore"
)

// Client identity. A client id is only asserted: upstream lets any call
// that names an id act for that client (unmount its segments, answer its
// heartbeats, end its puts). Our clients also send a secret drawn with
// the id (kvstore.ClientSecretMetadataKey). The first call that leaves a
// record of the client (a mount, remount, ping, reservation, disk mount)
// binds the secret's SHA-256 to the id, and from then on a call that
// names the id without the secret is refused with ILLEGAL_CLIENT and
// counted (master_client_identity_refused_total). With
// Options.RequireClientSecret a call that names a client id must carry a
// secret even before its id is bound, so no id is left unbound for
// another process to take. The binding lives in the client's record: it
// is logged (the hash, never the secret) and snapshotted with it, and it
// goes when the client is forgotten (client_dead_ttl), after which the
// client's next call binds it again.

// clientKeyMetadataKey carries a call's client key (the hex SHA-256 of
// its secret) in the oplog: a replayed call binds and checks the same key
// as the leader did, and the secret itself never reaches etcd. Only a
// replayed call's key is read from it.
const clientKeyMetadataKey = "mooncake-client-key"

// clientKey is the SHA-256 of a client's secret.
type clientKey [sha256.Size]byte

// caller is what a call shows of its client's identity.
type caller struct {
	key     clientKey
	has     bool // the call carries a secret
	bad     bool // the call carries a secret too short to be one
	require bool // calls naming a client id must carry a secret
}

// keyOfSecret is the client key of secret.
func keyOfSecret(secret string) clientKey { return sha256.Sum256([]byte(secret)) }

// caller reads the identity ctx's call shows: its secret's key, or for a
// replayed call the key the leader logged.
func (s *Server) caller(ctx context.Context) caller {
	c := caller{require: s.opts.RequireClientSecret || s.opts.TenantTokens != nil}
	if isReplay(ctx) {
		if v := metadata.ValueFromIncomingContext(ctx, clientKeyMetadataKey); len(v) > 0 {
			if b, err := hex.DecodeString(v[0]); err == nil && len(b) == len(c.key) {
				c.has = copy(c.key[:], b) > 0
			} else {
				c.bad = true // badClientKey: the leader refused a short secret
			}
		}
		return c
	}
	if v := metadata.ValueFromIncomingContext(ctx, kvstore.ClientSecretMetadataKey); len(v) > 0 {
		if len(v[0]) < kvstore.MinClientSecretLen {
			c.bad = true
			return c
		}
		c.key, c.has = keyOfSecret(v[0]), true
	}
	return c
}

// loggedClientKey is the oplog metadata entry of a call that carries
// secret: its key in hex, or badClientKey for a secret too short, which
// the replay refuses as the leader did.
func loggedClientKey(secret string) string {
	if len(secret) < kvstore.MinClientSecretLen {
		return badClientKey
	}
	k := keyOfSecret(secret)
	return hex.EncodeToString(k[:])
}

// badClientKey is the logged key of a secret too short to be one.
const badClientKey = "-"

// admit reports whether who may act for clientID (OK) or refuses it
// (ILLEGAL_CLIENT, counted). A call that names no client id acts for
// nobody and is admitted.
func (s *State) admit(clientID string, who caller) kvstore.ErrorCode {
	if clientID == "" {
		return kvstore.OK
	}
	ok := !who.bad
	if c, known := s.clients[clientID]; ok && known && c.keyed {
		ok = who.has && subtle.ConstantTimeCompare(c.key[:], who.key[:]) == 1
	} else if ok && who.require {
		ok = who.has
	}
	if !ok {
		s.m.identityRefused++
		return kvstore.IllegalClient
	}
	return kvstore.OK
}

// bind binds who's key to clientID's record when the record exists and
// has none yet (the client's registration).
func (s *State) bind(clientID string, who caller) {
	if c, ok := s.clients[clientID]; ok && who.has && !c.keyed {
		c.key, c.keyed = who.key, true
	}
}

// doAs is do for a call that acts for clientID: who must be admitted
// (State.admit), else refuse gets the refusal and f does not run; after
// f, who's key is bound to the client if f registered it.
func (s *Server) doAs(who caller, clientID string, refuse func(kvstore.ErrorCode), f func(st *State, now time.Time)) error {
	return s.do(func(st *State, now time.Time) {
		if code := st.admit(clientID, who); code != kvstore.OK {
			refuse(code)
			return
		}
		f(st, now)
		st.bind(clientID, who)
	})
}
