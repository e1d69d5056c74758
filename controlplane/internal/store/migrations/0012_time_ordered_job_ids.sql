-- Finished jobs are now deleted once their retention ends (0008 spoke of
-- them as never deleted). The pruning walks the primary key in time order,
-- which rests on every job id being a UUIDv7: the store gives one to every
-- job it inserts, and so does the column default from here on (it was a
-- random UUIDv4). A UUIDv7 is 48 bits of Unix milliseconds, the version,
-- then random bits: here a random UUIDv4 with its first six bytes replaced
-- by the time and its version bits turned from 4 (0100) to 7 (0111).
CREATE FUNCTION runmesh_uuid_v7() RETURNS uuid LANGUAGE sql VOLATILE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

ALTER TABLE jobs ALTER COLUMN id SET DEFAULT runmesh_uuid_v7();
