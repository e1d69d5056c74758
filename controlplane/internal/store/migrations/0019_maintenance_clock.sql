-- When each maintenance duty last ran, by the database's clock, whichever
-- replica ran it. A gap between two passes longer than their pace is time
-- in which no replica could reach the database (or none ran): the lease
-- rescuer gives held leases that time back before it takes back any, so
-- an outage does not use up the leases of runners that kept trying.
CREATE TABLE maintenance_clock (
    duty         text PRIMARY KEY,
    last_pass_at timestamptz NOT NULL
);
