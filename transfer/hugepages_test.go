package transfer

import "testing"

func TestManagedBufferRejectsOtherPageSizes(t *testing.T) {
	e, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: P2PHandshake})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.AllocateManagedBufferPages(1<<20, 4096); err == nil {
		t.Fatal("a 4 KiB huge page size was accepted")
	}
}
