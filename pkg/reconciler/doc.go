// Package reconciler is bootyd's host reconciler: the role of metal3's
// BareMetalHost controller, over booty's seed-001 Provisioner
// (pkg/provisioner). It drives every machine that has a BMC through its
// lifecycle by the machine's state, its spec and its Online (the power
// state the operator wants), one Provisioner call a claim.
//
// It runs as a pkg/manager control loop (process "reconcile"): each worker
// claims one machine through a BMDB session, so workers and bootyd
// replicas never work one machine at once, and never while the Recoverer
// or the Initializer holds it.
//
// # The state table
//
// A machine with a BMC address and not detached is worked by its state:
//
//	registering               ValidateManagementAccess (registration error); once
//	                          complete and HasCapacity: InspectHardware, which moves
//	                          it to inspecting and boots the agent through PXE
//	inspecting                InspectHardware (inspection error); the agent's report
//	                          moves it to available
//	available                 image in the spec and Online: HasCapacity, Provision
//	                          (provisioning error); otherwise power as Online says
//	                          (PowerOn, or a hard PowerOff; power management error)
//	provisioning              Provision (provisioning error), which boots the agent
//	                          once; after a failed provision, on retry: Deprovision,
//	                          so it goes on to available and is provisioned again;
//	                          an operator's provision without an image (config
//	                          overrides only) is left to the agent
//	provisioned,              the image removed from the spec (provisioned only):
//	externally provisioned    Deprovision; otherwise power as Online says: PowerOn
//	                          (boot device disk), or PowerOff, soft first and hard
//	                          on retry (power management error)
//	deprovisioning            Deprovision (provisioning error); the agent's report
//	                          moves it to available
//	preparing                 nothing (booty never prepares)
//	powering off before       a hard PowerOff; once off, on to deleting
//	delete
//	deleting                  a hard PowerOff; once off, Delete (after the claim
//	                          ends: a machine is deleted only when no work holds it)
//
// A machine powered off by the reconciler has its agent session ended
// ("reconciler: powered off"), so the Recoverer does not take the silence
// for a hung agent. Machines without a BMC are not touched: their operator
// drives them through the API, as before.
//
// # Results, errors and backoff
//
// A Dirty result is called again after its RequeueAfter; a complete one
// after Config.Resync, or as soon as the machine changes (its state, spec,
// Online, a report of its agent). A failure (the call's ErrorMessage) puts
// the machine in its error state, in metal3's error types, with the reason
// as message (status error, the error count plus one), and fails the claim
// with Config.ErrorBackoff, which the BMDB persists (metal3's 2^n minutes:
// 1 min doubling to 512 min, up to 50 % earlier at random): no replica
// retries it sooner. A Go error (network, database) backs off the same way
// without touching the machine's state. The retry after a failure calls
// with restartOnFailure, and the first call that succeeds clears the error
// state (status OK; the count stays until the agent's next success).
//
// When a machine is due is kept in memory per bootyd: another replica may
// call a machine earlier than RequeueAfter, which is harmless (each call
// reads the state and takes at most one step), but never during a backoff.
//
// The operator API's DELETE removes a machine at once; the reconciler's
// power off before the delete is for machines moved to powering off before
// delete.
package reconciler
