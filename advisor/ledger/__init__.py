"""The journal's store: what apply and validate changed, which changes stack on which, and what each apply recorded for its instances."""
