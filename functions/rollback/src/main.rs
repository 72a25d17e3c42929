use saga_lambda::Phase;

#[tokio::main]
async fn main() -> Result<(), saga_lambda::Error> {
    saga_lambda::serve(Phase::Rollback).await
}
