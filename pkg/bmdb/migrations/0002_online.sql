-- online is the power state the operator wants (metal3's BareMetalHost
-- spec.online): the host reconciler powers the machine on when true and off
-- when false, once no operation needs it otherwise.
ALTER TABLE machines ADD COLUMN online INTEGER NOT NULL DEFAULT 0;
