-- Join URLs (v1.2, part B): a join code may be handed out once through GET /j/<short>. Only a
-- hash of the short code is kept (url_hash), and the connect payload sealed under a key derived
-- from it (url_sealed); handing it out sets url_sealed to NULL, so it is never read twice.
ALTER TABLE join_codes
    ADD COLUMN url_hash   bytea UNIQUE,
    ADD COLUMN url_sealed bytea;
