// Package manager runs booty's fleet control loops over the Bare Metal
// Database (seed 004, after Monogon's BMaaS manager): the Provisioner brings
// machines from a machine source into the BMDB, the Initializer takes over
// machines that already run Linux by starting booty on them over SSH, and
// the Recoverer power-cycles machines whose agent went silent.
//
// # Work loops
//
// RunControlLoop runs a ControlLoop (Initializer, Recoverer) with
// Parallelism workers. Each worker holds a BMDB session (a lease its keeper
// pokes) and repeats: wait for DBQueryLimiter; list the loop's candidates;
// claim one with the BMDB's Claim, which in one transaction checks the
// session, the loop's filter, other sessions' work on the machine and the
// persisted backoff, and inserts the work row (UNIQUE per machine and
// process); do the work outside the database; then Finish or Fail (the
// backoff is persisted, so every replica honours it and it survives
// restarts). Several workers and several bootyd replicas on one PostgreSQL
// therefore never work one machine at once. Work runs with a context that
// ends when the session's lease lapses, so a worker whose session was lost
// (and whose machine may be reclaimed) stops acting; the BMDB refuses its
// Finish or Fail. A session that ended is reopened; a BMDB that cannot be
// reached is retried with a backoff up to 30 s.
//
// # The loops
//
//   - Provisioner (Run, Reconcile): each round lists the source and the
//     BMDB's machines labelled with the source, refuses to act when they
//     disagree about a machine that has not failed (ErrDisagree), and
//     creates up to MaxCount − managed machines, ChunkSize per round, paced
//     by DeviceCreationLimiter. Sources: an inventory file (LoadInventory),
//     MemSource for tests.
//   - Initializer: registering machines of its source without an agent
//     session: dial SSH (PlainClient, ed25519 SSHKey generated and persisted
//     when absent), upload booty and the CA, run `booty takeover --server
//     ENDPOINT [--ca-cert PATH]`, require TakeoverOK in its output, record
//     an AgentTakeover event. The machine is left alone for
//     AgentStartTimeout for its agent to enroll. Failures back off (5 min
//     ×1.2 to 4 h).
//   - Recoverer: machines in an agent state whose agent sent no heartbeat
//     within StartTimeout of enrolling, or whose last heartbeat is older
//     than HeartbeatTimeout, are power-cycled through their BMC into PXE
//     (BMCPowerCycler), their agent session ended and an
//     AgentSilentPowerCycled warning recorded. A machine that does not
//     enroll again within StartTimeout is cycled again with a growing
//     backoff.
package manager
