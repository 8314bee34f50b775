#!/usr/bin/env sysbench
-- hpadvise TPC-C workload for sysbench 1.0.x (drivers: mysql and pgsql).
--
-- Written for hpadvise from the TPC-C Standard Specification, revision 5.11 (TPC, 2010);
-- clause numbers are cited where a rule is implemented. It is a workload generator for A/B
-- comparisons, not an audited TPC-C: there is no terminal think/keying time (clause 5.2.5),
-- and the result is transactions per second of the whole mix.
--
-- Commands:
--   sysbench tpcc.lua --db-driver=mysql --mysql-socket=... --scale=1 --tables=1 prepare
--   sysbench tpcc.lua ... --threads=16 --time=60 --report-interval=1 run
--   sysbench tpcc.lua ... check      (the consistency conditions of clause 3.3.2.1-3.3.2.4)
--   sysbench tpcc.lua ... cleanup
--
-- Options: --scale warehouses per table set, --tables table sets (suffixes 1..N; every
-- transaction picks one set at random).

sysbench.cmdline.options = {
   scale = {"Warehouses per table set (clause 4.2)", 1},
   tables = {"Number of table sets", 1},
   mysql_storage_engine = {"MySQL storage engine", "InnoDB"},
}

-- ---------------------------------------------------------------- constants (clause 4.3.2.3,
-- 2.1.6)
local ITEMS = 100000            -- clause 4.3.3.1: ITEM has 100,000 rows
local DIST_PER_WH = 10          -- 10 districts per warehouse
local CUST_PER_DIST = 3000      -- 3,000 customers per district
local ORD_PER_DIST = 3000       -- 3,000 orders per district
local NEW_ORD_FROM = 2101       -- orders 2,101..3,000 are undelivered (NEW-ORDER rows)
local SYLLABLES = {"BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION",
                   "EING"}      -- clause 4.3.2.3
-- NURand C constants (clause 2.1.6): C for C_LAST at run time differs from the load's by a
-- delta in 65..119 other than 96 and 112 (clause 2.1.6.1).
local C_LAST_LOAD, C_LAST_RUN, C_ID, C_OL_I_ID = 157, 223, 259, 7911

local drv, con, DB

-- ---------------------------------------------------------------- random helpers (clause 2.1.5,
-- 2.1.6, 4.3.2.2)
local function rnd(a, b)
   return sysbench.rand.uniform(a, b)
end

local function nurand(A, x, y, C)
   return (((bit.bor(rnd(0, A), rnd(x, y))) + C) % (y - x + 1)) + x
end

local ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

local function astring(x, y)
   local n = rnd(x, y)
   local t = {}
   for i = 1, n do
      local k = rnd(1, #ALNUM)
      t[i] = ALNUM:sub(k, k)
   end
   return table.concat(t)
end

local function nstring(x, y)
   local n = rnd(x, y)
   local t = {}
   for i = 1, n do t[i] = tostring(rnd(0, 9)) end
   return table.concat(t)
end

local function zip()
   return nstring(4, 4) .. "11111"  -- clause 4.3.2.7
end

-- "ORIGINAL" in 10% of I_DATA / S_DATA, at a random position (clause 4.3.3.1)
local function data_original(x, y)
   local s = astring(x, y)
   if rnd(1, 10) == 1 then
      local pos = rnd(1, #s - 7)
      s = s:sub(1, pos - 1) .. "ORIGINAL" .. s:sub(pos + 8)
   end
   return s
end

local function last_name(n)  -- clause 4.3.2.3: three syllables from the digits of n
   return SYLLABLES[math.floor(n / 100) + 1] .. SYLLABLES[math.floor(n / 10) % 10 + 1]
      .. SYLLABLES[n % 10 + 1]
end

local function money(cents)
   return string.format("%.2f", cents / 100)
end

-- ---------------------------------------------------------------- schema (clause 1.3)
local function ts_type()
   return DB == "pgsql" and "TIMESTAMP" or "DATETIME"
end

local function engine()
   return DB == "mysql" and (" ENGINE=" .. sysbench.opt.mysql_storage_engine) or ""
end

local function create_tables(n)
   local ts = ts_type()
   local e = engine()
   local ddl = {
      string.format([[CREATE TABLE warehouse%d (
  w_id INT NOT NULL, w_name VARCHAR(10), w_street_1 VARCHAR(20), w_street_2 VARCHAR(20),
  w_city VARCHAR(20), w_state CHAR(2), w_zip CHAR(9), w_tax DECIMAL(4,4), w_ytd DECIMAL(12,2),
  PRIMARY KEY (w_id))%s]], n, e),
      string.format([[CREATE TABLE district%d (
  d_id INT NOT NULL, d_w_id INT NOT NULL, d_name VARCHAR(10), d_street_1 VARCHAR(20),
  d_street_2 VARCHAR(20), d_city VARCHAR(20), d_state CHAR(2), d_zip CHAR(9), d_tax DECIMAL(4,4),
  d_ytd DECIMAL(12,2), d_next_o_id INT, PRIMARY KEY (d_w_id, d_id))%s]], n, e),
      string.format([[CREATE TABLE customer%d (
  c_id INT NOT NULL, c_d_id INT NOT NULL, c_w_id INT NOT NULL, c_first VARCHAR(16),
  c_middle CHAR(2), c_last VARCHAR(16), c_street_1 VARCHAR(20), c_street_2 VARCHAR(20),
  c_city VARCHAR(20), c_state CHAR(2), c_zip CHAR(9), c_phone CHAR(16), c_since %s,
  c_credit CHAR(2), c_credit_lim DECIMAL(12,2), c_discount DECIMAL(4,4), c_balance DECIMAL(12,2),
  c_ytd_payment DECIMAL(12,2), c_payment_cnt INT, c_delivery_cnt INT, c_data VARCHAR(500),
  PRIMARY KEY (c_w_id, c_d_id, c_id))%s]], n, ts, e),
      string.format("CREATE INDEX idx_customer%d ON customer%d (c_w_id, c_d_id, c_last, c_first)",
                    n, n),
      string.format([[CREATE TABLE history%d (
  h_c_id INT, h_c_d_id INT, h_c_w_id INT, h_d_id INT, h_w_id INT, h_date %s,
  h_amount DECIMAL(6,2), h_data VARCHAR(24))%s]], n, ts, e),
      string.format([[CREATE TABLE new_order%d (
  no_o_id INT NOT NULL, no_d_id INT NOT NULL, no_w_id INT NOT NULL,
  PRIMARY KEY (no_w_id, no_d_id, no_o_id))%s]], n, e),
      string.format([[CREATE TABLE orders%d (
  o_id INT NOT NULL, o_d_id INT NOT NULL, o_w_id INT NOT NULL, o_c_id INT, o_entry_d %s,
  o_carrier_id INT, o_ol_cnt INT, o_all_local INT,
  PRIMARY KEY (o_w_id, o_d_id, o_id))%s]], n, ts, e),
      string.format("CREATE INDEX idx_orders%d ON orders%d (o_w_id, o_d_id, o_c_id, o_id)", n, n),
      string.format([[CREATE TABLE order_line%d (
  ol_o_id INT NOT NULL, ol_d_id INT NOT NULL, ol_w_id INT NOT NULL, ol_number INT NOT NULL,
  ol_i_id INT, ol_supply_w_id INT, ol_delivery_d %s, ol_quantity INT, ol_amount DECIMAL(6,2),
  ol_dist_info CHAR(24), PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number))%s]], n, ts, e),
      string.format([[CREATE TABLE item%d (
  i_id INT NOT NULL, i_im_id INT, i_name VARCHAR(24), i_price DECIMAL(5,2), i_data VARCHAR(50),
  PRIMARY KEY (i_id))%s]], n, e),
      string.format([[CREATE TABLE stock%d (
  s_i_id INT NOT NULL, s_w_id INT NOT NULL, s_quantity INT, s_dist_01 CHAR(24),
  s_dist_02 CHAR(24), s_dist_03 CHAR(24), s_dist_04 CHAR(24), s_dist_05 CHAR(24),
  s_dist_06 CHAR(24), s_dist_07 CHAR(24), s_dist_08 CHAR(24), s_dist_09 CHAR(24),
  s_dist_10 CHAR(24), s_ytd INT, s_order_cnt INT, s_remote_cnt INT, s_data VARCHAR(50),
  PRIMARY KEY (s_w_id, s_i_id))%s]], n, e),
   }
   for _, q in ipairs(ddl) do con:query(q) end
end

local TABLES = {"warehouse", "district", "customer", "history", "new_order", "orders",
                "order_line", "item", "stock"}

-- ---------------------------------------------------------------- population (clause 4.3.3.1)
local function bulk(prefix, rows_fn)
   con:bulk_insert_init(prefix)
   rows_fn(function(values) con:bulk_insert_next("(" .. values .. ")") end)
   con:bulk_insert_done()
end

local function load_items(n)
   bulk("INSERT INTO item" .. n .. " VALUES", function(add)
      for i = 1, ITEMS do
         add(string.format("%d,%d,'%s',%s,'%s'", i, rnd(1, 10000), astring(14, 24),
                           money(rnd(100, 10000)), data_original(26, 50)))
      end
   end)
end

local function load_warehouse(n, w)
   con:query(string.format("INSERT INTO warehouse%d VALUES (%d,'%s','%s','%s','%s','%s','%s',"
                              .. "%.4f,300000.00)", n, w, astring(6, 10), astring(10, 20),
                           astring(10, 20), astring(10, 20), astring(2, 2), zip(),
                           rnd(0, 2000) / 10000))
   bulk("INSERT INTO stock" .. n .. " VALUES", function(add)
      for i = 1, ITEMS do
         local d = {}
         for k = 1, 10 do d[k] = "'" .. astring(24, 24) .. "'" end
         add(string.format("%d,%d,%d,%s,0,0,0,'%s'", i, w, rnd(10, 100), table.concat(d, ","),
                           data_original(26, 50)))
      end
   end)
   for d = 1, DIST_PER_WH do
      con:query(string.format("INSERT INTO district%d VALUES (%d,%d,'%s','%s','%s','%s','%s',"
                                 .. "'%s',%.4f,30000.00,%d)", n, d, w, astring(6, 10),
                              astring(10, 20), astring(10, 20), astring(10, 20), astring(2, 2),
                              zip(), rnd(0, 2000) / 10000, ORD_PER_DIST + 1))
      bulk("INSERT INTO customer" .. n .. " VALUES", function(add)
         for c = 1, CUST_PER_DIST do
            -- C_LAST: 0..999 for the first 1,000 customers, NURand(255,0,999) after
            local last = last_name(c <= 1000 and c - 1 or nurand(255, 0, 999, C_LAST_LOAD))
            add(string.format("%d,%d,%d,'%s','OE','%s','%s','%s','%s','%s','%s','%s',NOW(),"
                                 .. "'%s',50000.00,%.4f,-10.00,10.00,1,0,'%s'", c, d, w,
                              astring(8, 16), last, astring(10, 20), astring(10, 20),
                              astring(10, 20), astring(2, 2), zip(), nstring(16, 16),
                              rnd(1, 10) == 1 and "BC" or "GC", rnd(0, 5000) / 10000,
                              astring(300, 500)))
         end
      end)
      bulk("INSERT INTO history" .. n .. " VALUES", function(add)
         for c = 1, CUST_PER_DIST do
            add(string.format("%d,%d,%d,%d,%d,NOW(),10.00,'%s'", c, d, w, d, w,
                              astring(12, 24)))
         end
      end)
      -- O_C_ID is a random permutation of 1..3,000
      local perm = {}
      for i = 1, CUST_PER_DIST do perm[i] = i end
      for i = CUST_PER_DIST, 2, -1 do
         local j = rnd(1, i)
         perm[i], perm[j] = perm[j], perm[i]
      end
      local cnt = {}
      bulk("INSERT INTO orders" .. n .. " VALUES", function(add)
         for o = 1, ORD_PER_DIST do
            cnt[o] = rnd(5, 15)
            local carrier = o < NEW_ORD_FROM and tostring(rnd(1, 10)) or "NULL"
            add(string.format("%d,%d,%d,%d,NOW(),%s,%d,1", o, d, w, perm[o], carrier, cnt[o]))
         end
      end)
      bulk("INSERT INTO order_line" .. n .. " VALUES", function(add)
         for o = 1, ORD_PER_DIST do
            for l = 1, cnt[o] do
               local delivered = o < NEW_ORD_FROM
               add(string.format("%d,%d,%d,%d,%d,%d,%s,5,%s,'%s'", o, d, w, l, rnd(1, ITEMS), w,
                                 delivered and "NOW()" or "NULL",
                                 delivered and "0.00" or money(rnd(1, 999999)), astring(24, 24)))
            end
         end
      end)
      bulk("INSERT INTO new_order" .. n .. " VALUES", function(add)
         for o = NEW_ORD_FROM, ORD_PER_DIST do
            add(string.format("%d,%d,%d", o, d, w))
         end
      end)
   end
end

local function connect()
   drv = sysbench.sql.driver()
   con = drv:connect()
   DB = drv:name()
end

local function table_exists(name)
   local q
   if DB == "pgsql" then
      q = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() "
         .. "AND table_name = '" .. name .. "'"
   else
      q = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() "
         .. "AND table_name = '" .. name .. "'"
   end
   return tonumber(con:query_row(q)) > 0
end

local function fail(msg)
   io.stderr:write("tpcc: " .. msg .. "\n")
   os.exit(2)
end

-- prepare runs in parallel: thread t loads table sets t+1, t+1+threads, ...
function cmd_prepare()
   connect()
   local scale, sets = sysbench.opt.scale, sysbench.opt.tables
   if scale < 1 or sets < 1 then fail("--scale and --tables must be at least 1") end
   for n = sysbench.tid % sysbench.opt.threads + 1, sets, sysbench.opt.threads do
      if table_exists("warehouse" .. n) then
         fail("table set " .. n .. " exists already; run cleanup first")
      end
      print(string.format("tpcc: creating table set %d (%d warehouse%s)", n, scale,
                          scale > 1 and "s" or ""))
      local ok, err = pcall(create_tables, n)
      if not ok then
         fail("cannot create the tables (" .. tostring(err) .. "); TPC-C needs a transactional "
                 .. "engine (InnoDB on MySQL/MariaDB)")
      end
      load_items(n)
      for w = 1, scale do
         load_warehouse(n, w)
         print(string.format("tpcc: table set %d: warehouse %d/%d loaded", n, w, scale))
      end
      -- Fresh optimizer statistics: InnoDB's persistent statistics sampled during the load
      -- plan the transactions badly after a restart (measured: 5x fewer TPS until ANALYZE).
      for _, t in ipairs(TABLES) do
         con:query((DB == "pgsql" and "ANALYZE " or "ANALYZE TABLE ") .. t .. n)
      end
   end
   con:disconnect()
end

function cmd_cleanup()
   connect()
   for n = 1, sysbench.opt.tables do
      for _, t in ipairs(TABLES) do
         con:query("DROP TABLE IF EXISTS " .. t .. n)
      end
   end
   con:disconnect()
end

-- ---------------------------------------------------------------- consistency (clause 3.3.2)
local function scalar(q)
   local v = con:query_row(q)
   return v
end

function cmd_check()
   connect()
   local bad = 0
   local function report(cond, n, w, d, a, b)
      bad = bad + 1
      print(string.format("tpcc: condition %d violated in set %d, warehouse %d%s: %s <> %s",
                          cond, n, w, d and (", district " .. d) or "", tostring(a), tostring(b)))
   end
   for n = 1, sysbench.opt.tables do
      if not table_exists("warehouse" .. n) then
         fail("table set " .. n .. " was never prepared; run prepare first")
      end
      for w = 1, sysbench.opt.scale do
         -- 1: W_YTD = sum(D_YTD)
         local wytd = scalar(string.format("SELECT w_ytd FROM warehouse%d WHERE w_id = %d", n, w))
         local dytd = scalar(string.format("SELECT SUM(d_ytd) FROM district%d WHERE d_w_id = %d",
                                           n, w))
         if tonumber(wytd) ~= tonumber(dytd) then report(1, n, w, nil, wytd, dytd) end
         for d = 1, DIST_PER_WH do
            local where = string.format("w_id = %d AND d_id = %d", w, d)
            -- 2: D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)
            local next_o = tonumber(scalar(string.format(
               "SELECT d_next_o_id FROM district%d WHERE d_w_id = %d AND d_id = %d", n, w, d)))
            local max_o = tonumber(scalar(string.format(
               "SELECT MAX(o_id) FROM orders%d WHERE o_w_id = %d AND o_d_id = %d", n, w, d)))
            local max_no, min_no, cnt_no = con:query_row(string.format(
               "SELECT MAX(no_o_id), MIN(no_o_id), COUNT(*) FROM new_order%d "
                  .. "WHERE no_w_id = %d AND no_d_id = %d", n, w, d))
            if next_o - 1 ~= max_o then report(2, n, w, d, next_o - 1, max_o) end
            if max_no and tonumber(max_no) ~= max_o then report(2, n, w, d, max_no, max_o) end
            -- 3: max(NO_O_ID) - min(NO_O_ID) + 1 = rows in NEW-ORDER
            if max_no and tonumber(max_no) - tonumber(min_no) + 1 ~= tonumber(cnt_no) then
               report(3, n, w, d, tonumber(max_no) - tonumber(min_no) + 1, cnt_no)
            end
            -- 4: sum(O_OL_CNT) = rows in ORDER-LINE
            local ol_cnt = scalar(string.format(
               "SELECT SUM(o_ol_cnt) FROM orders%d WHERE o_w_id = %d AND o_d_id = %d", n, w, d))
            local ol_rows = scalar(string.format(
               "SELECT COUNT(*) FROM order_line%d WHERE ol_w_id = %d AND ol_d_id = %d", n, w, d))
            if tonumber(ol_cnt) ~= tonumber(ol_rows) then report(4, n, w, d, ol_cnt, ol_rows) end
            local _ = where
         end
      end
   end
   con:disconnect()
   if bad > 0 then
      fail(bad .. " consistency condition(s) violated")
   end
   print("tpcc: consistency conditions 1-4 hold")
end

sysbench.cmdline.commands = {
   prepare = {cmd_prepare, sysbench.cmdline.PARALLEL_COMMAND},
   cleanup = {cmd_cleanup},
   check = {cmd_check},
}

-- ---------------------------------------------------------------- the transactions (clause 2)
-- Deadlocks and serialization failures restart the transaction after a ROLLBACK.
function sysbench.hooks.sql_error_ignorable(err)
   return err.sql_errno == 1213 or err.sql_errno == 1205 or err.sql_state == "40P01"
      or err.sql_state == "40001"
end

function sysbench.hooks.before_restart_event(err)
   con:query("ROLLBACK")
end

local S  -- the table set suffix of the current transaction

local function q(fmt, ...)
   return con:query(string.format(fmt, ...))
end

local function row(fmt, ...)
   return con:query_row(string.format(fmt, ...))
end

local function other_warehouse(w)
   local scale = sysbench.opt.scale
   if scale == 1 then return w end
   local o = rnd(1, scale - 1)
   return o >= w and o + 1 or o
end

-- Customer by last name: the row at position ceil(n/2) ordered by C_FIRST (clause 2.5.2.2)
local function customer_by_last(w, d, last, lock)
   local rs = q("SELECT c_id FROM customer%s WHERE c_w_id = %d AND c_d_id = %d AND c_last = '%s'"
                   .. " ORDER BY c_first", S, w, d, last)
   local ids = {}
   for i = 1, rs.nrows do ids[i] = rs:fetch_row()[1] end
   if #ids == 0 then return nil end
   return tonumber(ids[math.ceil(#ids / 2)])
end

local function new_order(w)   -- clause 2.4
   local d = rnd(1, DIST_PER_WH)
   local c = nurand(1023, 1, CUST_PER_DIST, C_ID)
   local n_lines = rnd(5, 15)
   local rollback = rnd(1, 100) == 1     -- 1% use an unused item number (2.4.1.4)
   local items = {}
   local all_local = 1
   for l = 1, n_lines do
      local it = {id = nurand(8191, 1, ITEMS, C_OL_I_ID), supply = w, qty = rnd(1, 10)}
      if sysbench.opt.scale > 1 and rnd(1, 100) == 1 then  -- 1% remote (2.4.1.5)
         it.supply = other_warehouse(w)
         all_local = 0
      end
      items[l] = it
   end
   if rollback then items[n_lines].id = ITEMS + 1 end
   con:query("BEGIN")
   row("SELECT w_tax FROM warehouse%s WHERE w_id = %d", S, w)
   local next_o = tonumber(row("SELECT d_next_o_id FROM district%s WHERE d_w_id = %d AND "
                                  .. "d_id = %d FOR UPDATE", S, w, d))
   q("UPDATE district%s SET d_next_o_id = %d WHERE d_w_id = %d AND d_id = %d", S, next_o + 1,
     w, d)
   row("SELECT c_discount, c_last, c_credit FROM customer%s WHERE c_w_id = %d AND c_d_id = %d "
          .. "AND c_id = %d", S, w, d, c)
   q("INSERT INTO orders%s VALUES (%d,%d,%d,%d,NOW(),NULL,%d,%d)", S, next_o, d, w, c, n_lines,
     all_local)
   q("INSERT INTO new_order%s VALUES (%d,%d,%d)", S, next_o, d, w)
   for l, it in ipairs(items) do
      local price = row("SELECT i_price FROM item%s WHERE i_id = %d", S, it.id)
      if price == nil then           -- "Item number is not valid": roll back (2.4.2.3)
         con:query("ROLLBACK")
         return
      end
      local qty, dist = row("SELECT s_quantity, s_dist_%02d FROM stock%s WHERE s_w_id = %d "
                               .. "AND s_i_id = %d FOR UPDATE", d, S, it.supply, it.id)
      qty = tonumber(qty)
      -- 2.4.2.2: S_QUANTITY - OL_QUANTITY if that leaves >= 10, else + 91
      local new_qty = qty - it.qty >= 10 and qty - it.qty or qty - it.qty + 91
      q("UPDATE stock%s SET s_quantity = %d, s_ytd = s_ytd + %d, s_order_cnt = s_order_cnt + 1,"
           .. " s_remote_cnt = s_remote_cnt + %d WHERE s_w_id = %d AND s_i_id = %d", S, new_qty,
        it.qty, it.supply ~= w and 1 or 0, it.supply, it.id)
      q("INSERT INTO order_line%s VALUES (%d,%d,%d,%d,%d,%d,NULL,%d,%.2f,'%s')", S, next_o, d, w,
        l, it.id, it.supply, it.qty, it.qty * tonumber(price), dist)
   end
   con:query("COMMIT")
end

local function payment(w)   -- clause 2.5
   local d = rnd(1, DIST_PER_WH)
   local c_w, c_d = w, d
   if sysbench.opt.scale > 1 and rnd(1, 100) > 85 then  -- 15% remote customer (2.5.1.2)
      c_w, c_d = other_warehouse(w), rnd(1, DIST_PER_WH)
   end
   local amount = rnd(100, 500000)  -- cents: 1.00 .. 5,000.00
   con:query("BEGIN")
   q("UPDATE warehouse%s SET w_ytd = w_ytd + %s WHERE w_id = %d", S, money(amount), w)
   local w_name = row("SELECT w_name FROM warehouse%s WHERE w_id = %d", S, w)
   q("UPDATE district%s SET d_ytd = d_ytd + %s WHERE d_w_id = %d AND d_id = %d", S,
     money(amount), w, d)
   local d_name = row("SELECT d_name FROM district%s WHERE d_w_id = %d AND d_id = %d", S, w, d)
   local c
   if rnd(1, 100) <= 60 then     -- 60% by last name (2.5.1.2)
      c = customer_by_last(c_w, c_d, last_name(nurand(255, 0, 999, C_LAST_RUN)))
   else
      c = nurand(1023, 1, CUST_PER_DIST, C_ID)
   end
   if c == nil then
      c = nurand(1023, 1, CUST_PER_DIST, C_ID)
   end
   local credit = row("SELECT c_credit FROM customer%s WHERE c_w_id = %d AND c_d_id = %d AND "
                         .. "c_id = %d FOR UPDATE", S, c_w, c_d, c)
   if credit == "BC" then        -- bad credit: prepend the payment to C_DATA (2.5.2.2)
      local info = string.format("%d %d %d %d %d %s | ", c, c_d, c_w, d, w, money(amount))
      local data = row("SELECT c_data FROM customer%s WHERE c_w_id = %d AND c_d_id = %d AND "
                          .. "c_id = %d", S, c_w, c_d, c)
      local new_data = (info .. (data or "")):sub(1, 500):gsub("'", "")
      q("UPDATE customer%s SET c_balance = c_balance - %s, c_ytd_payment = c_ytd_payment + %s, "
           .. "c_payment_cnt = c_payment_cnt + 1, c_data = '%s' WHERE c_w_id = %d AND "
           .. "c_d_id = %d AND c_id = %d", S, money(amount), money(amount), new_data, c_w, c_d, c)
   else
      q("UPDATE customer%s SET c_balance = c_balance - %s, c_ytd_payment = c_ytd_payment + %s, "
           .. "c_payment_cnt = c_payment_cnt + 1 WHERE c_w_id = %d AND c_d_id = %d AND "
           .. "c_id = %d", S, money(amount), money(amount), c_w, c_d, c)
   end
   q("INSERT INTO history%s VALUES (%d,%d,%d,%d,%d,NOW(),%s,'%s')", S, c, c_d, c_w, d, w,
     money(amount), ((w_name or "") .. "    " .. (d_name or "")):sub(1, 24):gsub("'", ""))
   con:query("COMMIT")
end

local function order_status(w)   -- clause 2.6 (read-only)
   local d = rnd(1, DIST_PER_WH)
   con:query("BEGIN")
   local c
   if rnd(1, 100) <= 60 then
      c = customer_by_last(w, d, last_name(nurand(255, 0, 999, C_LAST_RUN)))
   end
   c = c or nurand(1023, 1, CUST_PER_DIST, C_ID)
   row("SELECT c_balance, c_first, c_middle, c_last FROM customer%s WHERE c_w_id = %d AND "
          .. "c_d_id = %d AND c_id = %d", S, w, d, c)
   local o = row("SELECT o_id FROM orders%s WHERE o_w_id = %d AND o_d_id = %d AND o_c_id = %d "
                    .. "ORDER BY o_id DESC LIMIT 1", S, w, d, c)
   if o then
      q("SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d FROM "
           .. "order_line%s WHERE ol_w_id = %d AND ol_d_id = %d AND ol_o_id = %d", S, w, d, o)
   end
   con:query("COMMIT")
end

local function delivery(w)   -- clause 2.7, one transaction for the 10 districts
   local carrier = rnd(1, 10)
   con:query("BEGIN")
   for d = 1, DIST_PER_WH do
      local o = row("SELECT no_o_id FROM new_order%s WHERE no_w_id = %d AND no_d_id = %d "
                       .. "ORDER BY no_o_id LIMIT 1 FOR UPDATE", S, w, d)
      if o then   -- none left: the district is skipped (2.7.4.2)
         q("DELETE FROM new_order%s WHERE no_w_id = %d AND no_d_id = %d AND no_o_id = %s", S, w,
           d, o)
         local c = row("SELECT o_c_id FROM orders%s WHERE o_w_id = %d AND o_d_id = %d AND "
                          .. "o_id = %s", S, w, d, o)
         q("UPDATE orders%s SET o_carrier_id = %d WHERE o_w_id = %d AND o_d_id = %d AND "
              .. "o_id = %s", S, carrier, w, d, o)
         q("UPDATE order_line%s SET ol_delivery_d = NOW() WHERE ol_w_id = %d AND ol_d_id = %d "
              .. "AND ol_o_id = %s", S, w, d, o)
         local total = row("SELECT SUM(ol_amount) FROM order_line%s WHERE ol_w_id = %d AND "
                              .. "ol_d_id = %d AND ol_o_id = %s", S, w, d, o)
         q("UPDATE customer%s SET c_balance = c_balance + %s, c_delivery_cnt = c_delivery_cnt + 1"
              .. " WHERE c_w_id = %d AND c_d_id = %d AND c_id = %s", S, total or "0", w, d, c)
      end
   end
   con:query("COMMIT")
end

local function stock_level(w)   -- clause 2.8 (read-only)
   local d = rnd(1, DIST_PER_WH)
   local threshold = rnd(10, 20)
   con:query("BEGIN")
   local next_o = tonumber(row("SELECT d_next_o_id FROM district%s WHERE d_w_id = %d AND "
                                  .. "d_id = %d", S, w, d))
   row("SELECT COUNT(DISTINCT s_i_id) FROM order_line%s, stock%s WHERE ol_w_id = %d AND "
          .. "ol_d_id = %d AND ol_o_id < %d AND ol_o_id >= %d AND s_w_id = %d AND "
          .. "s_i_id = ol_i_id AND s_quantity < %d", S, S, w, d, next_o, next_o - 20, w,
       threshold)
   con:query("COMMIT")
end

function thread_init()
   connect()
   for n = 1, sysbench.opt.tables do
      for _, t in ipairs(TABLES) do
         if not table_exists(t .. n) then
            fail("table " .. t .. n .. " does not exist: run the prepare command first "
                    .. "(with the same --tables and --scale)")
         end
      end
   end
   if DB == "pgsql" then
      con:query("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED")
   end
end

function thread_done()
   con:disconnect()
end

-- The mix of clause 5.2.3: Payment 43%, Order-Status 4%, Delivery 4%, Stock-Level 4%, the rest
-- (45%) New-Order. The home warehouse is uniform over the warehouses (clause 2.4.1.1).
function event()
   S = tostring(rnd(1, sysbench.opt.tables))
   local w = rnd(1, sysbench.opt.scale)
   local x = rnd(1, 100)
   if x <= 45 then
      new_order(w)
   elseif x <= 88 then
      payment(w)
   elseif x <= 92 then
      order_status(w)
   elseif x <= 96 then
      delivery(w)
   else
      stock_level(w)
   end
end
