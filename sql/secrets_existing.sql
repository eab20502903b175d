-- Which of the names $2 exist as secrets of workspace $1 (dispatch checks every named secret).
SELECT name FROM secrets WHERE workspace = $1 AND name = ANY($2::text[])
