-- The machines with a BMC, by name: the host reconciler lists them several
-- times a second (ListOptions.WithBMC); a fleet of agents without BMCs
-- would otherwise be read whole each time.
CREATE INDEX machines_with_bmc ON machines (name) WHERE bmc_address <> '';
