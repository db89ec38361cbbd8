//! Hostile HTTP: clients that stall or abandon their bodies, and requests refused before the
//! webhook handler. Each ends with its documented status, writes nothing and is counted.

mod body_memory;
mod both_fronts;
mod early_answers;
mod refused;
mod slow_bodies;
