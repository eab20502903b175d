-- Which of the names $2 exist as secrets of workspace $1, with their scope (dispatch checks
-- every named secret, and who may name it for which runners).
SELECT name, runners, dispatch FROM secrets WHERE workspace = $1 AND name = ANY($2::text[])
