-- hpadvise TPC-C workload: its data. The constants, random values, schema and initial
-- population of the TPC-C Standard Specification, revision 5.11 (TPC, 2010), clause numbers
-- cited. tpcc.lua loads it (require "tpcc_data"), and so does tpcc_tx.lua; what reaches the
-- database takes the connection and the driver's name ("mysql" or "pgsql").

local M = {}

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
local function ts_type(db)
   return db == "pgsql" and "TIMESTAMP" or "DATETIME"
end

local function engine(db)
   return db == "mysql" and (" ENGINE=" .. sysbench.opt.mysql_storage_engine) or ""
end

function M.create_tables(con, db, n)
   local ts = ts_type(db)
   local e = engine(db)
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
local function bulk(con, prefix, rows_fn)
   con:bulk_insert_init(prefix)
   rows_fn(function(values) con:bulk_insert_next("(" .. values .. ")") end)
   con:bulk_insert_done()
end

function M.load_items(con, n)
   bulk(con, "INSERT INTO item" .. n .. " VALUES", function(add)
      for i = 1, ITEMS do
         add(string.format("%d,%d,'%s',%s,'%s'", i, rnd(1, 10000), astring(14, 24),
                           money(rnd(100, 10000)), data_original(26, 50)))
      end
   end)
end

function M.load_warehouse(con, n, w)
   con:query(string.format("INSERT INTO warehouse%d VALUES (%d,'%s','%s','%s','%s','%s','%s',"
                              .. "%.4f,300000.00)", n, w, astring(6, 10), astring(10, 20),
                           astring(10, 20), astring(10, 20), astring(2, 2), zip(),
                           rnd(0, 2000) / 10000))
   bulk(con, "INSERT INTO stock" .. n .. " VALUES", function(add)
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
      bulk(con, "INSERT INTO customer" .. n .. " VALUES", function(add)
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
      bulk(con, "INSERT INTO history" .. n .. " VALUES", function(add)
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
      bulk(con, "INSERT INTO orders" .. n .. " VALUES", function(add)
         for o = 1, ORD_PER_DIST do
            cnt[o] = rnd(5, 15)
            local carrier = o < NEW_ORD_FROM and tostring(rnd(1, 10)) or "NULL"
            add(string.format("%d,%d,%d,%d,NOW(),%s,%d,1", o, d, w, perm[o], carrier, cnt[o]))
         end
      end)
      bulk(con, "INSERT INTO order_line" .. n .. " VALUES", function(add)
         for o = 1, ORD_PER_DIST do
            for l = 1, cnt[o] do
               local delivered = o < NEW_ORD_FROM
               add(string.format("%d,%d,%d,%d,%d,%d,%s,5,%s,'%s'", o, d, w, l, rnd(1, ITEMS), w,
                                 delivered and "NOW()" or "NULL",
                                 delivered and "0.00" or money(rnd(1, 999999)), astring(24, 24)))
            end
         end
      end)
      bulk(con, "INSERT INTO new_order" .. n .. " VALUES", function(add)
         for o = NEW_ORD_FROM, ORD_PER_DIST do
            add(string.format("%d,%d,%d", o, d, w))
         end
      end)
   end
end

M.ITEMS, M.DIST_PER_WH, M.CUST_PER_DIST = ITEMS, DIST_PER_WH, CUST_PER_DIST
M.C_LAST_RUN, M.C_ID, M.C_OL_I_ID = C_LAST_RUN, C_ID, C_OL_I_ID
M.rnd, M.nurand, M.last_name, M.money = rnd, nurand, last_name, money
M.TABLES = TABLES
return M
