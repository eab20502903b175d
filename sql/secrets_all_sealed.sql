-- Every sealed value, for re-sealing under a new key (`leasehold admin reseal-secrets`).
SELECT workspace, name, nonce, ciphertext FROM secrets ORDER BY workspace, name
