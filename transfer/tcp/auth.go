package tcp

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mooncake-go/mooncake/internal/envvars"
)

// Authenticated peers (optional). With a cluster secret (MC_TE_SECRET_FILE
// or MC_TE_SECRET), every data connection starts with a challenge-response
// in both directions before the first request, and a peer that does not
// prove it holds the secret can neither read nor write the exposed memory:
//
//	initiator → target  hello: "MCTA", version 1, zeros, byte 16 = 0xff,
//	                    zeros to byte 24, then a 32-byte nonce Ni
//	target → initiator  a 32-byte nonce Nt, then
//	                    HMAC-SHA256(secret, "mooncake-te target" Ni Nt)
//	initiator → target  HMAC-SHA256(secret, "mooncake-te initiator" Ni Nt)
//	target → initiator  a status frame: OK, or REJECTED before it closes
//
// Nonces come from crypto/rand and MACs are compared in constant time.
// The labels keep one side's MAC from serving as the other's, and each
// side's fresh nonce keeps an old exchange from being replayed. The
// hello's byte 16 is an opcode no target knows, so a target without a
// secret closes such a connection at once instead of reading a request
// out of it. After the exchange the connection carries requests as
// before: the secret costs one round trip per connection, none per
// transfer. The bytes themselves travel in clear.

const (
	authMagic     = "MCTA"
	authVersion   = 1
	authNonceSize = 32
	authMACSize   = sha256.Size
	// authHelloSize is the hello: a request header's size (so that its
	// opcode byte lands where a target without a secret reads one) and
	// the nonce.
	authHelloSize = tcpHeaderSize + authNonceSize
	// authMarker is the hello's byte 16, an opcode no target serves.
	authMarker = 0xff
	// MinSecretLen is the shortest cluster secret accepted.
	MinSecretLen = 16

	labelTarget    = "mooncake-te target"
	labelInitiator = "mooncake-te initiator"
)

// errAuth is a failed exchange: the peer does not hold the secret, or
// does not speak the exchange.
var errAuth = errors.New("tcp: the peer did not prove it holds the cluster secret")

// encodeHello is the initiator's hello carrying nonce.
func encodeHello(nonce []byte) []byte {
	b := make([]byte, authHelloSize)
	copy(b, authMagic)
	b[4] = authVersion
	b[16] = authMarker
	copy(b[tcpHeaderSize:], nonce)
	return b
}

// parseHello checks a hello and returns its nonce.
func parseHello(b []byte) ([]byte, error) {
	if len(b) != authHelloSize {
		return nil, fmt.Errorf("tcp hello: %d bytes, want %d", len(b), authHelloSize)
	}
	if string(b[:4]) != authMagic || b[4] != authVersion || b[16] != authMarker ||
		!allZero(b[5:16]) || !allZero(b[17:tcpHeaderSize]) {
		return nil, errors.New("tcp hello: not an authenticated hello (version 1)")
	}
	return b[tcpHeaderSize:], nil
}

func allZero(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) }

// authMAC is the MAC one side sends for the nonces.
func authMAC(secret []byte, label string, initiator, target []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(initiator)
	m.Write(target)
	return m.Sum(nil)
}

// nonce draws a fresh nonce.
func nonce() ([]byte, error) {
	b := make([]byte, authNonceSize)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("tcp: nonce: %w", err)
	}
	return b, nil
}

// authInitiator runs the initiator's side of the exchange on a new
// connection (its deadline set by the caller).
func authInitiator(r io.Reader, w io.Writer, secret []byte) error {
	ni, err := nonce()
	if err != nil {
		return err
	}
	if _, err := w.Write(encodeHello(ni)); err != nil {
		return err
	}
	var ch [authNonceSize + authMACSize]byte
	if _, err := io.ReadFull(r, ch[:]); err != nil {
		return fmt.Errorf("%w: %v", errAuth, err)
	}
	nt := ch[:authNonceSize]
	if !hmac.Equal(ch[authNonceSize:], authMAC(secret, labelTarget, ni, nt)) {
		return errAuth
	}
	if _, err := w.Write(authMAC(secret, labelInitiator, ni, nt)); err != nil {
		return err
	}
	var st [8]byte
	if _, err := io.ReadFull(r, st[:]); err != nil {
		return fmt.Errorf("%w: %v", errAuth, err)
	}
	if code, err := decodeStatus(st[:]); err != nil || code != statusOK {
		return errAuth
	}
	return nil
}

// authTarget runs the target's side of the exchange on an accepted
// connection (its deadline set by the caller); it answers a peer that
// fails it with a REJECTED status where it can.
func authTarget(r io.Reader, w io.Writer, secret []byte) error {
	hello := make([]byte, authHelloSize)
	if _, err := io.ReadFull(r, hello[:tcpHeaderSize]); err != nil {
		return err
	}
	// A request header instead of a hello: a peer without the secret.
	if string(hello[:4]) != authMagic {
		writeStatus(w, statusRejected)
		return errAuth
	}
	if _, err := io.ReadFull(r, hello[tcpHeaderSize:]); err != nil {
		return err
	}
	ni, err := parseHello(hello)
	if err != nil {
		writeStatus(w, statusRejected)
		return fmt.Errorf("%w: %v", errAuth, err)
	}
	nt, err := nonce()
	if err != nil {
		return err
	}
	if _, err := w.Write(append(nt, authMAC(secret, labelTarget, ni, nt)...)); err != nil {
		return err
	}
	var mac [authMACSize]byte
	if _, err := io.ReadFull(r, mac[:]); err != nil {
		return err
	}
	if !hmac.Equal(mac[:], authMAC(secret, labelInitiator, ni, nt)) {
		writeStatus(w, statusRejected)
		return errAuth
	}
	if !writeStatus(w, statusOK) {
		return errAuth
	}
	return nil
}

// LoadSecret returns the cluster secret of the environment: the contents
// of the file MC_TE_SECRET_FILE names (surrounding blanks trimmed; the
// file must not be readable by other users), else MC_TE_SECRET; nil when
// neither is set. A secret shorter than MinSecretLen bytes is an error.
func LoadSecret() ([]byte, error) {
	var s string
	if path, ok := envvars.TESecretFile.Lookup(); ok {
		b, err := readSecretFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", envvars.TESecretFile.Name, err)
		}
		s = strings.TrimSpace(string(b))
	} else if s, ok = envvars.TESecret.Lookup(); !ok {
		return nil, nil
	}
	if len(s) < MinSecretLen {
		return nil, fmt.Errorf("the TE cluster secret is %d bytes, want at least %d", len(s), MinSecretLen)
	}
	return []byte(s), nil
}

// readSecretFile reads a secret file that other users cannot read.
func readSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o007 != 0 {
		return nil, fmt.Errorf("%s is accessible to other users (mode %v); chmod o= it", path, fi.Mode().Perm())
	}
	return io.ReadAll(io.LimitReader(f, 64<<10))
}
