-- Run once by the mariadb:11 image's entrypoint (as root).
CREATE USER IF NOT EXISTS 'odbox'@'%' IDENTIFIED BY 'odbox-test-pw';
CREATE USER IF NOT EXISTS 'odbox'@'localhost' IDENTIFIED BY 'odbox-test-pw';
-- Tests create databases of their own (eventlog_t1, ...): everything, everywhere.
GRANT ALL PRIVILEGES ON *.* TO 'odbox'@'%' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO 'odbox'@'localhost' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS odbox_test CHARACTER SET utf8mb4;
CREATE DATABASE IF NOT EXISTS odbox_test2 CHARACTER SET utf8mb4;
CREATE DATABASE IF NOT EXISTS odbox_test_mysql CHARACTER SET utf8mb4;
CREATE DATABASE IF NOT EXISTS odbox_test_mysql2 CHARACTER SET utf8mb4;
