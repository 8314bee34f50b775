-- hpadvise TPC-C workload: its five transactions (clause 2 of the TPC-C Standard
-- Specification, revision 5.11) and their mix (clause 5.2.3). tpcc.lua's event() calls
-- one(con) once an event.

local data = require("tpcc_data")
local rnd, nurand, last_name, money = data.rnd, data.nurand, data.last_name, data.money
local ITEMS, DIST_PER_WH, CUST_PER_DIST = data.ITEMS, data.DIST_PER_WH, data.CUST_PER_DIST
local C_LAST_RUN, C_ID, C_OL_I_ID = data.C_LAST_RUN, data.C_ID, data.C_OL_I_ID

local M = {}
local con  -- the connection of the thread that runs the event
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

-- The mix of clause 5.2.3: Payment 43%, Order-Status 4%, Delivery 4%, Stock-Level 4%, the rest
-- (45%) New-Order. The home warehouse is uniform over the warehouses (clause 2.4.1.1).
function M.one(connection)
   con = connection
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

return M
