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
--
-- Its data (constants, schema, population) are in tpcc_data.lua, its transactions in
-- tpcc_tx.lua, both beside this file: sysbench loads them from the script's own directory.

sysbench.cmdline.options = {
   scale = {"Warehouses per table set (clause 4.2)", 1},
   tables = {"Number of table sets", 1},
   mysql_storage_engine = {"MySQL storage engine", "InnoDB"},
}

-- the modules beside this script (sysbench.cmdline.script_path: this file, as sysbench got it)
package.path = (sysbench.cmdline.script_path:match("^(.*)/[^/]*$") or ".") .. "/?.lua;"
   .. package.path
local data = require("tpcc_data")
local tx = require("tpcc_tx")

local drv, con, DB

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
      local ok, err = pcall(data.create_tables, con, DB, n)
      if not ok then
         fail("cannot create the tables (" .. tostring(err) .. "); TPC-C needs a transactional "
                 .. "engine (InnoDB on MySQL/MariaDB)")
      end
      data.load_items(con, n)
      for w = 1, scale do
         data.load_warehouse(con, n, w)
         print(string.format("tpcc: table set %d: warehouse %d/%d loaded", n, w, scale))
      end
      -- Fresh optimizer statistics: InnoDB's persistent statistics sampled during the load
      -- plan the transactions badly after a restart (measured: 5x fewer TPS until ANALYZE).
      for _, t in ipairs(data.TABLES) do
         con:query((DB == "pgsql" and "ANALYZE " or "ANALYZE TABLE ") .. t .. n)
      end
   end
   con:disconnect()
end

function cmd_cleanup()
   connect()
   for n = 1, sysbench.opt.tables do
      for _, t in ipairs(data.TABLES) do
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
         for d = 1, data.DIST_PER_WH do
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

function thread_init()
   connect()
   for n = 1, sysbench.opt.tables do
      for _, t in ipairs(data.TABLES) do
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

function event()
   tx.one(con)
end
