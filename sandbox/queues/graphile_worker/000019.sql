--! breaking-change
-- This is just a breaking change marker for the v0.17 worker-centric to
-- pool-centric jump. The migration itself is not breaking.
select 1;
