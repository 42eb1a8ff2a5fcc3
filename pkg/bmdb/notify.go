package bmdb

import "sync"

// notifier wakes the goroutines of this process that wait for a change of a
// machine (WaitCommand). Each machine has at most one channel; a change closes
// it and the next watcher gets a fresh one. Other replicas' changes are not
// seen here: waiters also poll the database.
type notifier struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

// watch returns a channel that is closed at the next change of machine id.
// Take it before reading the database so no change falls in between.
func (n *notifier) watch(id string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(map[string]chan struct{})
	}
	c, ok := n.ch[id]
	if !ok {
		c = make(chan struct{})
		n.ch[id] = c
	}
	return c
}

// changed wakes every watcher of machine id. Call it after the commit.
func (n *notifier) changed(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.ch[id]; ok {
		close(c)
		delete(n.ch, id)
	}
}
