package bmdb

import (
	"crypto/sha256"
	"crypto/subtle"
	"sync"
	"time"
)

// AuthCacheTTL is the longest Authenticate answers from its cache without
// reading the database: an agent heartbeats every 10 s and long-polls
// every 25 s, so a life much shorter would rarely be hit, and each agent
// costs a query per AuthCacheTTL (167/s for 10,000 agents).
//
// The cache stays correct because every change of an agent session (an
// enrollment replacing the token, a session ended, a machine deleted or
// its MACs changed) wakes the machine's watchers (notifier.changed), in
// this process at once and, on PostgreSQL, in every other replica through
// LISTEN/NOTIFY, and that wake drops the machine's entries. A token that
// stopped working on one replica is therefore refused by the others as
// soon as the notification arrives, milliseconds after the commit. A
// replica whose listener is not connected (starting, or reconnecting after
// a lost connection) does not use the cache at all, and drops it whole when
// the listener connects again, since notifications may have been missed.
// AuthCacheTTL only bounds what nothing else would: an entry is never older.
const AuthCacheTTL = time.Minute

// maxAuthCache bounds the entries; a full cache is emptied (the next
// requests read the database and fill it again).
const maxAuthCache = 200_000

// authCache remembers the (MAC, token) pairs Authenticate verified against
// the database: the token's SHA-256 and the machine, by MAC.
type authCache struct {
	mu        sync.Mutex
	byMAC     map[string]authEntry
	byMachine map[string][]string // machine ID → its cached MACs
	// epoch counts invalidations. Authenticate reads it before its query
	// and stores what it read only if it did not change meanwhile: a
	// session ended while the query ran is then not cached as live.
	epoch uint64
}

type authEntry struct {
	hash    [sha256.Size]byte
	id      string
	expires time.Time
}

// lookup returns the machine of mac when the cache holds mac with a token
// whose SHA-256 is hash, not expired.
func (c *authCache) lookup(mac string, hash [sha256.Size]byte, now time.Time) (string, bool) {
	c.mu.Lock()
	e, ok := c.byMAC[mac]
	c.mu.Unlock()
	if !ok || !now.Before(e.expires) || subtle.ConstantTimeCompare(e.hash[:], hash[:]) != 1 {
		return "", false
	}
	return e.id, true
}

// currentEpoch returns the invalidation count, for store.
func (c *authCache) currentEpoch() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// store caches that mac's token hash belongs to a live session of machine
// id, unless an invalidation happened since epoch was read.
func (c *authCache) store(epoch uint64, mac string, hash [sha256.Size]byte, id string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch != epoch {
		return
	}
	if len(c.byMAC) >= maxAuthCache {
		c.byMAC, c.byMachine = nil, nil
	}
	if c.byMAC == nil {
		c.byMAC = make(map[string]authEntry)
		c.byMachine = make(map[string][]string)
	}
	if old, ok := c.byMAC[mac]; ok && old.id != id {
		c.dropLocked(old.id)
	}
	if _, ok := c.byMAC[mac]; !ok {
		c.byMachine[id] = append(c.byMachine[id], mac)
	}
	c.byMAC[mac] = authEntry{hash: hash, id: id, expires: now.Add(AuthCacheTTL)}
}

// drop forgets machine id's entries.
func (c *authCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.dropLocked(id)
}

func (c *authCache) dropLocked(id string) {
	for _, mac := range c.byMachine[id] {
		delete(c.byMAC, mac)
	}
	delete(c.byMachine, id)
}

// dropAll forgets every entry.
func (c *authCache) dropAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.byMAC, c.byMachine = nil, nil
}

// idleCache remembers the machines PendingCommand found without a command,
// for up to AuthCacheTTL, so a fleet's long polls (one every 25 s per
// agent) do not each read the database. It only ever holds absence: a
// command is issued with a change of the machine (Transition, here or, on
// PostgreSQL, announced by another replica), and every change drops the
// machine's entry before its watchers are woken, so their re-read sees the
// command. It is used on PostgreSQL while the listener is connected, with
// the same epoch guard as Authenticate's cache.
type idleCache struct {
	mu    sync.Mutex
	until map[string]time.Time // machine ID → end of the entry's life
	epoch uint64
}

// idle says whether machine id is known to have no pending command.
func (c *idleCache) idle(id string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.until[id]
	return ok && now.Before(t)
}

func (c *idleCache) currentEpoch() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// store records that machine id had no command, unless a change came since
// epoch was read.
func (c *idleCache) store(epoch uint64, id string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch != epoch {
		return
	}
	if c.until == nil || len(c.until) >= maxAuthCache {
		c.until = make(map[string]time.Time)
	}
	c.until[id] = now.Add(AuthCacheTTL)
}

func (c *idleCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	delete(c.until, id)
}

func (c *idleCache) dropAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.until = nil
}
