-- Pruning walks certificates by expiry (PruneCertificates). A runner renews
-- every two thirds of a lifetime, so without pruning the table grew by a
-- row per runner every 16 hours, for ever.
CREATE INDEX certificates_expiry ON certificates (not_after);
