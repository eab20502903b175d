-- The job table's dead row versions removed, and their index entries, at once rather than at
-- autovacuum's next turn (up to autovacuum_naptime away): sent by hub::vacuum when the
-- database's oldest snapshot was old and is young again, so what it kept back can go now.
VACUUM jobs
