"""MariaDB and MySQL under validate: the scratch server handle and its sysbench driver."""
