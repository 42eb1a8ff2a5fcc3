//go:build !linux

package inventory

import (
	"context"
	"time"
)

// ListenLLDP hears nothing outside Linux: raw packet sockets are Linux's.
func ListenLLDP(ctx context.Context, links []string, wait time.Duration) map[string]Neighbor {
	return map[string]Neighbor{}
}

// WatchLLDP hears nothing outside Linux: raw packet sockets are Linux's.
func WatchLLDP(ctx context.Context, links []string, wait time.Duration, heard func(link string, n Neighbor)) map[string]Neighbor {
	return map[string]Neighbor{}
}
