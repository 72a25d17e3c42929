// The handler's future, built in the library, is laid out here, past the compiler's default query depth (128).
#![recursion_limit = "256"]

#[tokio::main]
async fn main() -> Result<(), saga_lambda::Error> {
    saga_stage::run().await
}
