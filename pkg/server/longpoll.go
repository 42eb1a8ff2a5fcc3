package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/booty-dev/booty/pkg/bmdb"
)

// Parked long polls. Every enrolled agent holds a command long poll open
// almost all the time; held by net/http, each costs two goroutines (the
// connection's and its background reader), their stacks, the connection's
// read and write buffers and the request: about 45 KiB, 450 MiB for 10,000
// agents. A poll that finds no command is parked instead: its handler takes
// the connection over (Hijack) and returns, so all that is left is the
// connection, a timer and a callback registered with the BMDB (OnChange),
// a few hundred bytes. A change of the machine (or the end of the wait)
// starts a goroutine that reads the command, writes the HTTP/1.1 answer
// and hands the connection back to the http.Server (pollListener), which
// serves the agent's next request on it as on any kept-alive connection.
// Without that listener (a Handler mounted elsewhere) the answer says
// "Connection: close" and the connection is closed.

// parkWriteTimeout bounds writing the answer of a parked poll.
const parkWriteTimeout = 10 * time.Second

// parkedPoll is one command long poll held without a goroutine.
type parkedPoll struct {
	s        *Server
	a        agentAuth
	deadline time.Time
	mustEnd  bool // close the connection after the answer

	mu      sync.Mutex
	conn    net.Conn // nil until the handler took the connection over
	woken   bool     // a wake-up came while conn was nil or finish ran
	changed bool     // the machine changed since the last read
	running bool     // finish is running
	cancel  func()   // drops the OnChange registration
	timer   *time.Timer
}

// park holds the poll of a for up to wait without a goroutine, when it is
// HTTP/1.1 and no command is pending; it returns false (nothing written)
// when the poll cannot be parked and must wait in WaitCommand. It answers
// at once when a command is pending or the database fails.
func (s *Server) park(w http.ResponseWriter, r *http.Request, a agentAuth, wait time.Duration) bool {
	if r.ProtoMajor != 1 || r.ProtoMinor < 1 {
		return false
	}
	p := &parkedPoll{s: s, a: a, deadline: time.Now().Add(wait), mustEnd: r.Close}
	// Registered before the read, so no command falls in between.
	p.cancel = s.db.OnChange(a.id, p.change)
	c, err := s.db.PendingCommand(r.Context(), a.id)
	if err != nil || c != nil {
		p.cancel()
		s.answerCommand(r.Context(), w, a, c, err)
		return true
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		p.cancel()
		return false
	}
	if brw.Reader.Buffered() > 0 {
		// The client sent its next request already; those bytes cannot
		// go back to the http.Server.
		p.mustEnd = true
	}
	_ = conn.SetDeadline(time.Time{}) // logRequests' deadlines were the handler's
	if !s.parked.add(p) {
		p.cancel()
		conn.Close()
		return true
	}
	p.mu.Lock()
	p.conn = conn
	p.timer = time.AfterFunc(wait, p.wake)
	run := p.woken
	p.woken = false
	p.running = run
	p.mu.Unlock()
	if run {
		s.parked.goFinish(p)
	}
	return true
}

// change is called by the machine's change: the next finish reads the
// pending command.
func (p *parkedPoll) change() {
	p.mu.Lock()
	p.changed = true
	p.mu.Unlock()
	p.wake()
}

// wake is called by change and by the wait's timer; it starts finish
// unless it runs already (then finish runs once more).
func (p *parkedPoll) wake() {
	p.mu.Lock()
	if p.conn == nil || p.running {
		p.woken = true
		p.mu.Unlock()
		return
	}
	p.running = true
	p.mu.Unlock()
	p.s.parked.goFinish(p)
}

// finish reads the machine's pending command; with none and time left it
// parks the poll again, otherwise it answers and hands the connection back.
// At the end of the wait, a machine that did not change since the last read
// is answered "no command" without reading again: every command is issued
// with a change (bmdb.OnChange, on PostgreSQL also from other replicas),
// and the agent's next poll reads anyway, so even a change whose
// announcement was lost is seen then. A fleet's polls end every 25 s: that
// is a query per agent per wait saved.
func (p *parkedPoll) finish() {
	s := p.s
	ctx, cancel := context.WithTimeout(context.Background(), apiDeadline)
	defer cancel()
	for {
		p.cancel()
		left := time.Until(p.deadline) > 0 && !s.parked.isClosed()
		if left {
			p.cancel = s.db.OnChange(p.a.id, p.change)
		}
		p.mu.Lock()
		changed := p.changed
		p.changed = false
		p.mu.Unlock()
		var c *bmdb.Command
		var err error
		if changed || left {
			c, err = s.db.PendingCommand(ctx, p.a.id)
		}
		if err == nil && c == nil && left {
			p.mu.Lock()
			if p.woken {
				p.woken = false
				p.mu.Unlock()
				continue
			}
			p.running = false
			p.mu.Unlock()
			return
		}
		p.cancel()
		p.timer.Stop()
		s.parked.remove(p)
		rw := newBufferedResponse()
		s.answerCommand(ctx, rw, p.a, c, err)
		p.respond(rw)
		return
	}
}

// respond writes the answer on the connection, then hands the connection
// back to the http.Server, or closes it.
func (p *parkedPoll) respond(rw *bufferedResponse) {
	s := p.s
	end := p.mustEnd
	back := s.parked.handBack()
	if back == nil {
		end = true
	}
	h := rw.header
	if rw.status != http.StatusNoContent && rw.status >= 200 {
		h.Set("Content-Length", strconv.Itoa(rw.body.Len()))
	}
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	if end {
		h.Set("Connection", "close")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", rw.status, http.StatusText(rw.status))
	_ = h.Write(&b)
	b.WriteString("\r\n")
	if rw.status != http.StatusNoContent {
		b.Write(rw.body.Bytes())
	}
	_ = p.conn.SetWriteDeadline(time.Now().Add(parkWriteTimeout))
	if _, err := p.conn.Write(b.Bytes()); err != nil {
		s.log.Debug("answer a parked command poll", "mac", p.a.mac, "err", err)
		p.conn.Close()
		return
	}
	_ = p.conn.SetWriteDeadline(time.Time{})
	if end {
		p.conn.Close()
		return
	}
	if pc := asPollConn(p.conn); pc != nil {
		pc.handedBack.Store(true)
	}
	if !back(p.conn) {
		p.conn.Close()
	}
}

// bufferedResponse is an http.ResponseWriter into memory, so that a parked
// poll's answer is built by the same code as a held one's.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newBufferedResponse() *bufferedResponse {
	return &bufferedResponse{header: http.Header{}}
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

// parkedPolls is the set of parked polls, closed at shutdown, and the way
// back into the http.Server for their connections.
type parkedPolls struct {
	mu     sync.Mutex
	polls  map[*parkedPoll]struct{}
	back   func(net.Conn) bool
	closed bool
	// running counts the finish goroutines, which close waits for: they
	// read the database and log, so they must end before it closes.
	running sync.WaitGroup
}

// goFinish runs p.finish in a goroutine that close waits for.
func (pp *parkedPolls) goFinish(p *parkedPoll) {
	pp.running.Add(1)
	go func() {
		defer pp.running.Done()
		p.finish()
	}()
}

func (pp *parkedPolls) add(p *parkedPoll) bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.closed {
		return false
	}
	if pp.polls == nil {
		pp.polls = make(map[*parkedPoll]struct{})
	}
	pp.polls[p] = struct{}{}
	return true
}

func (pp *parkedPolls) remove(p *parkedPoll) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	delete(pp.polls, p)
}

func (pp *parkedPolls) isClosed() bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.closed
}

func (pp *parkedPolls) handBack() func(net.Conn) bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.closed {
		return nil
	}
	return pp.back
}

// len is how many polls are parked.
func (pp *parkedPolls) len() int {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return len(pp.polls)
}

// serving sets the way back into the http.Server (nil: none).
func (pp *parkedPolls) serving(back func(net.Conn) bool) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.back = back
}

// close ends every parked poll at shutdown: each is woken and, its wait
// cut short, answered 204 with "Connection: close" (the agent polls again,
// elsewhere or after the restart). It waits for every answer (the
// goroutines that read the database and write it) at most until ctx ends.
func (pp *parkedPolls) close(ctx context.Context) {
	pp.mu.Lock()
	pp.closed = true
	polls := make([]*parkedPoll, 0, len(pp.polls))
	for p := range pp.polls {
		polls = append(polls, p)
	}
	pp.mu.Unlock()
	for _, p := range polls {
		p.wake()
	}
	for pp.len() > 0 && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	done := make(chan struct{})
	go func() { pp.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// pollListener is the http.Server's listener: the connections it accepts
// (wrapped in TLS when configured) and the connections of answered parked
// polls, handed back to be served again.
type pollListener struct {
	net.Listener
	tls      *tls.Config
	idle     time.Duration // the server's IdleTimeout
	back     chan net.Conn
	accepted chan acceptResult
	done     chan struct{}
	once     sync.Once
}

// pollConn is an accepted connection. The http.Server serves a handed-back
// connection as a new one, whose first request must come within
// ReadHeaderTimeout (10 s); but the agent's next request on a kept-alive
// connection may come much later. Until the first bytes of that request
// arrive, pollConn stretches every read deadline the server sets to at
// least the idle timeout, as for any kept-alive connection.
type pollConn struct {
	net.Conn
	idle       time.Duration
	handedBack atomic.Bool
}

func (c *pollConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.handedBack.Store(false)
	}
	return n, err
}

func (c *pollConn) SetReadDeadline(t time.Time) error {
	if c.handedBack.Load() && !t.IsZero() {
		if idle := time.Now().Add(c.idle); t.Before(idle) {
			t = idle
		}
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *pollConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

// ReadFrom and CloseWrite reach the TCP connection's, so /files/ answers
// still go out with sendfile and connections still close gracefully.
func (c *pollConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

func (c *pollConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// asPollConn finds the pollConn under a hijacked connection (itself, or
// the one under its TLS); nil for connections bootyd's listener did not
// accept (a Handler mounted elsewhere).
func asPollConn(c net.Conn) *pollConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	pc, _ := c.(*pollConn)
	return pc
}

type acceptResult struct {
	c   net.Conn
	err error
}

// newPollListener accepts on ln in a goroutine of its own until Close.
func newPollListener(ln net.Listener, cfg *tls.Config, idle time.Duration) *pollListener {
	l := &pollListener{Listener: ln, tls: cfg, idle: idle, back: make(chan net.Conn), accepted: make(chan acceptResult), done: make(chan struct{})}
	go func() {
		for {
			c, err := ln.Accept()
			select {
			case l.accepted <- acceptResult{c, err}:
			case <-l.done:
				if c != nil {
					c.Close()
				}
				return
			}
			if err != nil && errors.Is(err, net.ErrClosed) {
				return
			}
		}
	}()
	return l
}

func (l *pollListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.back:
		return c, nil
	case r := <-l.accepted:
		if r.err != nil {
			return nil, r.err
		}
		c := &pollConn{Conn: r.c, idle: l.idle}
		if l.tls != nil {
			return tls.Server(c, l.tls), nil
		}
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// handBack gives c to the http.Server to serve its next request; false
// when the listener is closed (the caller closes c).
func (l *pollListener) handBack(c net.Conn) bool {
	select {
	case l.back <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *pollListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.Listener.Close()
	})
	return err
}
