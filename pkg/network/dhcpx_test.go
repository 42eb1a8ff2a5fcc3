package network

import (
	"context"
	"net/netip"
	"testing"

	uiorand "github.com/u-root/uio/rand"
)

// blockingRand stands for the kernel's random pool before its CRNG is
// ready (a machine without a hardware RNG): every read waits until its
// context ends.
type blockingRand struct{}

func (blockingRand) Read(b []byte) (int, error) {
	return blockingRand{}.ReadContext(context.Background(), b)
}

func (blockingRand) ReadContext(ctx context.Context, b []byte) (int, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// DHCP must not wait for cryptographic randomness: the DHCP library's
// transaction IDs come from this reader, which here never answers.
func TestConfigureDHCPWithoutRandomness(t *testing.T) {
	prev := uiorand.Reader
	uiorand.Reader = blockingRand{}
	t.Cleanup(func() { uiorand.Reader = prev })

	n := newTestNet(t)
	n.veth(t, "srv0", "cli0", "10.123.0.1/24", false)
	n.dhcpServer(t, "srv0")
	opts := n.opts(t)
	res, err := Configure(t.Context(), opts)
	if err != nil {
		t.Fatalf("Configure with a blocking random source: %v", err)
	}
	if res.Address != netip.MustParsePrefix("10.123.0.10/24") {
		t.Errorf("Address = %s, want 10.123.0.10/24", res.Address)
	}
	n.assertApplied(t, "cli0", "10.123.0.10/24", "10.123.0.1")
}

func TestNewXIDVaries(t *testing.T) {
	seen := map[[4]byte]bool{}
	for range 64 {
		seen[newXID()] = true
	}
	if len(seen) < 60 {
		t.Errorf("64 transaction IDs gave %d distinct values", len(seen))
	}
}
