package transfer

import (
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/mooncake-go/mooncake/transfer/metadata"
	"github.com/mooncake-go/mooncake/transfer/metaserver"
)

// TestNameTakenLeavesTheOwnersKeys: an engine started under a name that
// another engine registered in the HTTP metadata server fails with
// ErrNameTaken, and its cleanup does not withdraw the owner's keys (it
// used to, and a second try under the same name then took it over).
func TestNameTakenLeavesTheOwnersKeys(t *testing.T) {
	srv := httptest.NewServer(metaserver.New())
	defer srv.Close()
	meta := srv.URL + "/metadata"
	owner, err := New(Config{LocalHostname: "127.0.0.1:45001", MetadataServer: meta})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	for range 2 {
		if e, err := New(Config{LocalHostname: "127.0.0.1:45001", MetadataServer: meta}); !errors.Is(err, metadata.ErrNameTaken) {
			if e != nil {
				e.Close()
			}
			t.Fatalf("second engine under the owner's name: %v; want ErrNameTaken", err)
		}
	}
	peer, err := New(Config{LocalHostname: "127.0.0.1:45002", MetadataServer: meta})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if _, err := peer.OpenSegment("127.0.0.1:45001"); err != nil {
		t.Fatalf("the owner's segment after the refused engines: %v", err)
	}
}
