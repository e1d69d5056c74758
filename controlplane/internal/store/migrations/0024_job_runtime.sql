-- How a job runs beyond its image, command and claim: a network (only in
-- a pool that allows one), a working directory, a scratch tmpfs. One
-- document, NULL for a job that asks for none of it (nearly all): the row
-- of such a job grows by nothing, and the batch insert by one array.
ALTER TABLE jobs ADD COLUMN options jsonb;

-- A pool may allow its jobs a network (rootless: pasta or slirp4netns).
-- Checked when a job is submitted: a job accepted with a network keeps it.
ALTER TABLE pools ADD COLUMN allow_network boolean NOT NULL DEFAULT false;
